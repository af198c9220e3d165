"""Sentence embeddings as a validated task: the texts, the FP32 reference embedding and the agent that runs
`embedding`-kind packages (the graph itself is bc1s/embedding.py; golden files and gates live in validation/)."""
