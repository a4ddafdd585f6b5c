"""Stand-in for vLLM in the laguna-spark molecule tests: no GPU, same CLI surface."""
__version__ = "0.0.0+laguna.standin"
