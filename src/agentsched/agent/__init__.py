"""The agentic scheduler: a reasoner (deterministic ``rules`` or an OpenAI-compatible ``llm``) over
four evidence streams, driven by the runtime monitor (``agentsched.monitor``)."""
