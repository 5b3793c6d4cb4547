package directive

import "encoding/json"

// Each directive marshals as its fields plus the "type" tag. The local alias
// types drop the MarshalJSON method so the fields flatten beside the tag.

func (d Warm) MarshalJSON() ([]byte, error) {
	type a Warm
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbWarm, a(d)})
}

func (d Prune) MarshalJSON() ([]byte, error) {
	type a Prune
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbPrune, a(d)})
}

func (d Cache) MarshalJSON() ([]byte, error) {
	type a Cache
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbCache, a(d)})
}

func (d Think) MarshalJSON() ([]byte, error) {
	type a Think
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbThink, a(d)})
}

func (d Pause) MarshalJSON() ([]byte, error) {
	type a Pause
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbPause, a(d)})
}

func (d RenewLease) MarshalJSON() ([]byte, error) {
	type a RenewLease
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbRenewLease, a(d)})
}

func (d RevokeLease) MarshalJSON() ([]byte, error) {
	type a RevokeLease
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbRevokeLease, a(d)})
}

func (d Splice) MarshalJSON() ([]byte, error) {
	type a Splice
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbSplice, a(d)})
}

func (d Pin) MarshalJSON() ([]byte, error) {
	type a Pin
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbPin, a(d)})
}

func (d Retain) MarshalJSON() ([]byte, error) {
	type a Retain
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbRetain, a(d)})
}

func (d Evict) MarshalJSON() ([]byte, error) {
	type a Evict
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbEvict, a(d)})
}

func (d Resume) MarshalJSON() ([]byte, error) {
	type a Resume
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbResume, a(d)})
}

func (d Share) MarshalJSON() ([]byte, error) {
	type a Share
	return json.Marshal(struct {
		Type Verb `json:"type"`
		a
	}{VerbShare, a(d)})
}
