"""The Python side of ``kvpilot bench vllm``: vLLM's CPU build with and
without the kvpilot connector, on a real kvpilot host (kvbench.vllm.scenario).
"""
