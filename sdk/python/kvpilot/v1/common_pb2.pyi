from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    TIER_DEVICE: _ClassVar[Tier]
    TIER_HOST: _ClassVar[Tier]
    TIER_DISK: _ClassVar[Tier]
    TIER_REMOTE: _ClassVar[Tier]
TIER_UNSPECIFIED: Tier
TIER_DEVICE: Tier
TIER_HOST: Tier
TIER_DISK: Tier
TIER_REMOTE: Tier

class Error(_message.Message):
    __slots__ = ("code", "number", "message", "hint", "detail", "index")
    CODE_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    code: str
    number: int
    message: str
    hint: str
    detail: str
    index: int
    def __init__(self, code: _Optional[str] = ..., number: _Optional[int] = ..., message: _Optional[str] = ..., hint: _Optional[str] = ..., detail: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...
