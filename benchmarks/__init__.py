"""memoryhub's benchmark harness: ``python -m benchmarks --scale small|medium|large``."""
