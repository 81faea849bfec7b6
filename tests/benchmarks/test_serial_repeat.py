"""The serial-engine repeat report says which passes differ and shows them."""

from bench.serial_repeat import PASSES, render


def report(third: str) -> dict:
    base = {"equal": 2, "differing": [], "seconds": 1.0}
    return {"model": "m.gguf", "sentences": 2, "cpus": 2, "started": "t", "uptime_before": "u", "uptime_after": "u",
            "passes": {PASSES[0]: base, PASSES[1]: base,
                       PASSES[2]: {"equal": 1 if third else 2, "seconds": 1.0,
                                   "differing": [{"input": "No edema.", "first": "No swelling.", "this": third}]
                                   if third else []}}}


def test_all_passes_equal_says_the_differences_come_from_batching():
    text = render(report(""))
    assert "| in order, fresh engine | 2 / 2 | 1.0 |" in text
    assert "come from batching" in text


def test_a_differing_pass_is_listed_with_both_texts():
    text = render(report("No fluid."))
    assert "| in order, fresh engine | 1 / 2 | 1.0 |" in text
    assert "* in order, fresh engine: No edema." in text and "this: No fluid." in text
    assert "come from batching" not in text
