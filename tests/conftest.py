import pytest

from agentsched.model.cards import CardSet, ToolCard


@pytest.fixture
def tiny_cards() -> CardSet:
    """Hand-made cards whose timelines can be computed by hand."""
    return CardSet(
        name="tiny",
        cards={
            "x": ToolCard(name="x", cpu_ms=100, gpu_ms=10, load_ms=50, vram_mb=400,
                          contention_sensitivity=1.0, contention_pressure=1.0),
            "y": ToolCard(name="y", cpu_ms=200, gpu_ms=20, load_ms=30, vram_mb=300,
                          contention_sensitivity=0.5, contention_pressure=1.0),
            "z": ToolCard(name="z", cpu_ms=40, tags=("io-bound",)),
        },
    )
