"""Helpers of the vLLM connector tests: a tiny model and a vLLM runner."""
