"""Sentence embeddings as a validated task: the texts and the agent that runs
`embedding`-kind packages (the graph is bc1s/embedding.py, the FP32 reference model/sentence_embedder.py; golden
files and gates live in validation/)."""
