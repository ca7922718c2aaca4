"""Run the SpecGuard graph on the tiny offline models and print each step as it is decided."""

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.testing import tiny_models

models = tiny_models()
config = SpecGuardConfig(k=4, tau=0.6, max_steps=6, max_step_tokens=24)
graph = build_graph(models.draft, models.target, embedder=models.embedder, config=config).compile()
for event in graph.stream({"question": "What is 2 + 3?"}, stream_mode="custom"):
    if event["event"] == "step":
        print(f"step {event['index']}: {event['source']:6} score={event['score']}")
    if event["event"] == "done":
        print("status:", event["status"])
