"""Real member clusters over Kubernetes (kubernetes-asyncio): see :mod:`.cluster`."""
