"""Retrieved worked examples (inference/examples.py): the shipped pool,
retrieval that never returns the sentence itself, the cross-fit split and
the sentence splitter. No Redis, no model."""

from __future__ import annotations

import csv

import pytest

from bench.corpora import corpus_file
from inference import examples
from inference.examples import (
    Example,
    ExamplePool,
    NoteSentence,
    cluster_messages,
    cluster_prefix_messages,
    crossfit_folds,
    default_pool,
    default_router,
    heading_split,
    normalise,
    note_sentences,
    split_sentences,
)


def _dev_rows() -> list[dict[str, str]]:
    with open(corpus_file("laymaker-dev.csv"), newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_the_shipped_pool_is_laymaker_devs_changed_rows_unedited():
    pool = default_pool()
    dev = {r["ID"]: r for r in _dev_rows()}
    changed = {i for i, r in dev.items() if normalise(r["ORIGINAL"]) != normalise(r["REFERENCE"])}
    assert pool.ids == changed and len(pool) == 175
    for e in pool.examples:
        assert (e.original, e.reference) == (dev[e.id]["ORIGINAL"], dev[e.id]["REFERENCE"])


def test_the_build_command_regenerates_the_shipped_file(tmp_path):
    dest = tmp_path / "pool.csv"
    assert examples.build_pool(corpus_file("laymaker-dev.csv"), dest) == 175
    assert dest.read_bytes() == examples.POOL_PATH.read_bytes()


def test_the_held_back_test_set_is_refused(tmp_path):
    with pytest.raises(ValueError):
        examples.build_pool(tmp_path / "test-set.csv", tmp_path / "out.csv")


def test_retrieval_returns_pool_rows_most_similar_first_and_never_the_sentence_itself():
    pool = default_pool()
    by_id = {e.id: e for e in pool.examples}
    for e in pool.examples[:40]:
        for query in (e.original, "  " + e.original.upper() + " ", e.original.replace(" .", ".")):
            found = pool.retrieve(query, 6)
            assert len(found) == 6
            assert all(normalise(f.original) != normalise(query) for f in found)
            assert all((f.original, f.reference) == (by_id[f.id].original, by_id[f.id].reference) for f in found)
            assert [f.score for f in found] == sorted((f.score for f in found), reverse=True)


def test_a_similar_sentence_finds_its_neighbour():
    found = default_pool().retrieve("There is 2+ pretibial edema bilaterally .", 3)
    assert any("pretibial edema" in f.original for f in found)
    assert 0 < found[0].score <= 1


def test_a_subset_pool_returns_only_its_ids():
    pool = default_pool()
    ids = sorted(pool.ids)[:30]
    sub = pool.subset(ids + ["no-such-id"])
    assert sub.ids == set(ids)
    assert {f.id for f in sub.retrieve("Abdomen soft, nontender .", 10)} <= set(ids)
    assert len(sub.retrieve("x", 100)) == 30


def test_a_pool_of_one_row_equal_to_the_query_returns_nothing():
    pool = ExamplePool([Example("1", "Left knee effusion .", "fluid in your left knee")])
    assert pool.retrieve("left knee effusion.", 3) == []
    assert pool.retrieve("Right knee effusion.", 3)[0].id == "1"


def test_the_cross_fit_split_is_deterministic_disjoint_and_covers_every_row():
    ids = [r["ID"] for r in _dev_rows()]
    a, b = crossfit_folds(ids)
    assert (a, b) == crossfit_folds(list(reversed(ids)))  # order of the input does not matter
    assert not a & b and a | b == set(ids) and abs(len(a) - len(b)) <= 1
    assert crossfit_folds(ids, seed=1) != (a, b)
    pool = default_pool()
    # each half's changed rows form the other half's pool
    assert pool.subset(b).ids.isdisjoint(a) and len(pool.subset(a)) + len(pool.subset(b)) == len(pool)


NOTE = """PHYSICAL EXAMINATION :
GENERAL : Alert and oriented x3, in no acute distress. Vital signs stable.
ABDOMEN : Soft, nontender, nondistended. Bowel sounds present.
EXTREMITIES: No edema. HEENT: PERRLA.
Dr. Smith saw the patient on 01/02/2020 and started metoprolol 25 mg b.i.d. for hypertension."""


def test_a_clinical_note_with_headings_splits_into_its_sentences():
    assert split_sentences(NOTE) == [
        "PHYSICAL EXAMINATION :",
        "GENERAL : Alert and oriented x3, in no acute distress.",
        "Vital signs stable.",
        "ABDOMEN : Soft, nontender, nondistended.",
        "Bowel sounds present.",
        "EXTREMITIES: No edema.",
        "HEENT: PERRLA.",
        "Dr. Smith saw the patient on 01/02/2020 and started metoprolol 25 mg b.i.d. for hypertension.",
    ]


def test_one_sentence_and_blank_text():
    assert split_sentences("  There is 1+ pretibial edema .  ") == ["There is 1+ pretibial edema ."]
    assert split_sentences(" \n\n ") == []


def test_clusters_give_every_sentence_of_a_cluster_the_same_fixed_examples():
    pool = default_pool()
    router = pool.clusters(4, per_cluster=3)
    assert len(router.fixed) == 4 and all(len(f) == 3 for f in router.fixed)
    routed = {}
    for e in pool.examples[:30]:
        cluster, fixed = router.route(e.original)
        assert all(normalise(f.original) != normalise(e.original) for f in fixed)
        if len(fixed) == 3:
            assert routed.setdefault(cluster, fixed) == fixed


def test_messages_per_sentence_retrieve_for_each_sentence_of_a_note():
    from inference.prompts import EXAMPLES_SYSTEM_PROMPT

    plan = examples.messages_per_sentence("ABDOMEN : Soft, nontender. There is 1+ pretibial edema .",
                                          reading_level=8, language="es", k=2)
    assert [sentence for sentence, _ in plan] == ["ABDOMEN : Soft, nontender.", "There is 1+ pretibial edema ."]
    (_, first), (_, second) = plan
    assert first[0] == second[0] and first[0]["content"].startswith(EXAMPLES_SYSTEM_PROMPT.splitlines()[0])
    assert "US grade 8" in first[0]["content"] and first[0]["content"].endswith("in Spanish.")
    assert len(first) == len(second) == 1 + 2 * 2 + 1
    assert second[-1]["content"] == "There is 1+ pretibial edema ." != second[-3]["content"]


def test_headings_stay_with_their_findings_and_each_sentence_keeps_its_break():
    units = note_sentences(NOTE.replace("ABDOMEN", "\nABDOMEN"))  # a blank line before ABDOMEN
    assert units == [
        NoteSentence("PHYSICAL EXAMINATION :\nGENERAL : Alert and oriented x3, in no acute distress.", ""),
        NoteSentence("Vital signs stable.", " "),
        NoteSentence("ABDOMEN : Soft, nontender, nondistended.", "\n\n"),
        NoteSentence("Bowel sounds present.", " "),
        NoteSentence("EXTREMITIES: No edema.", "\n"),
        NoteSentence("HEENT: PERRLA.", " "),
        NoteSentence("Dr. Smith saw the patient on 01/02/2020 and started metoprolol 25 mg b.i.d. for hypertension.",
                     "\n"),
    ]


def test_consecutive_headings_join_the_first_findings_and_a_last_heading_stands_alone():
    assert note_sentences("Stable.\nHEAD :\nNECK :\nSupple. PLAN:") == [
        NoteSentence("Stable.", ""), NoteSentence("HEAD :\nNECK :\nSupple.", "\n"), NoteSentence("PLAN:", " ")]
    assert note_sentences("ASSESSMENT :") == [NoteSentence("ASSESSMENT :", "")]
    assert note_sentences("  \n ") == []


def test_two_sentences_of_one_cluster_get_the_same_prefix_and_never_themselves():
    from tests.data import laymaker_sentences

    router = default_router(24, 8)
    by_cluster: dict[int, list[list[dict]]] = {}
    for sentence in laymaker_sentences():  # the pool's 175 rows and 75 sentences outside it
        messages = cluster_messages(sentence, router=router, k=2)
        turns = [m["content"] for m in messages[1:-1] if m["role"] == "user"]
        inline = [note.partition("\n")[0] for note in messages[-1]["content"].split("Note: ")[1:-1]]
        assert len(inline) == 2 and messages[-1]["content"].endswith(f"Note: {sentence}")
        assert all(normalise(shown) != normalise(sentence) for shown in turns + inline)
        cluster, fixed = router.route(sentence)
        if len(fixed) == len(router.fixed[cluster]):  # not one of its own cluster's fixed examples
            by_cluster.setdefault(cluster, []).append(messages)
            assert messages[:-1] == cluster_prefix_messages(cluster, router=router)[:-1]
    shared = [group for group in by_cluster.values() if len(group) >= 2]
    assert len(shared) >= 10
    for group in shared:
        assert len({repr(messages[:-1]) for messages in group}) == 1


def test_the_retrieved_examples_go_inline_after_the_cluster_turns_and_repeat_none():
    router = default_router(24, 8)
    sentence = "There is 2+ pitting edema of both lower legs ."
    cluster, fixed = router.route(sentence)
    messages = cluster_messages(sentence, router=router, k=3)
    assert messages[0]["role"] == "system" and len(messages) == 1 + 2 * len(fixed) + 1
    assert [m["content"] for m in messages[1:-1:2]] == [e.original.strip() for e in fixed]
    last = messages[-1]["content"]
    assert last.endswith(f"Note: {sentence}") and last.count("Note: ") == 4
    assert not any(f"Note: {e.original.strip()}\n" in last for e in fixed)
    assert cluster_messages(sentence, router=router)[-1] == {"role": "user", "content": sentence}


def test_the_clusters_are_the_same_in_a_fresh_process_on_any_number_of_threads():
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import json; from inference.examples import default_router; "
            "r = default_router(24, 8); print(json.dumps([[e.id for e in f] for f in r.fixed]))")
    here = [[e.id for e in f] for f in default_router(24, 8).fixed]
    root = Path(__file__).resolve().parents[2]
    for threads in ("1", "2"):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "PYTHONPATH": str(root)}
        out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                             timeout=120, check=True).stdout
        assert json.loads(out.strip().splitlines()[-1]) == here
    assert default_router(24, 8) is default_router(24, 8)  # fitted once per process


def test_a_router_refuses_more_clusters_than_rows():
    with pytest.raises(ValueError):
        default_pool().subset(["1", "2", "3"]).clusters(5)


@pytest.mark.parametrize("text, heading, rest", [
    ("NEUROLOGIC : I can not assess at this time .", "NEUROLOGIC : ", "I can not assess at this time ."),
    ("PHYSICAL EXAMINATION :\nGENERAL : Alert.", "PHYSICAL EXAMINATION :\nGENERAL : ", "Alert."),
    ("HEENT:normocephalic.", "HEENT:", "normocephalic."),
    ("CC : Stable expressive aphasia .", "CC : ", "Stable expressive aphasia ."),
    ("ABDOMEN :", "", "ABDOMEN :"),  # nothing after it: the model gets the heading
    ("There is 1+ pretibial edema.", "", "There is 1+ pretibial edema."),
    ("Blood pressure: 120/80.", "", "Blood pressure: 120/80."),  # not capitals: a finding
    ("The MRI: normal.", "", "The MRI: normal."),  # a heading only at the start
])
def test_the_leading_headings_are_split_off_and_the_findings_kept_whole(text, heading, rest):
    assert heading_split(text) == (heading, rest)
    assert heading + rest == text


@pytest.mark.parametrize("k, headings", [(0, False), (2, False), (0, True)])
def test_the_product_renders_what_the_quality_benchmark_measures(monkeypatch, tmp_path, k, headings):
    """``bench/quality.py --clusters N --per-cluster M --k K --placement
    inline`` and the product (:func:`cluster_messages`) send the same
    messages for a pool: there each cross-fitted half, here the whole pool."""
    import asyncio

    from bench import quality

    captured = {}

    async def keep_the_renderer(inputs, *, messages_for, variant, **options):
        captured.update(inputs=inputs, messages_for=messages_for, variant=variant)
        return [], {}

    monkeypatch.setattr(quality, "run_system", keep_the_renderer)
    rows = quality.laymaker_rows()[0][:40]
    asyncio.run(quality.run_examples(rows, k=k, placement="inline", fold="both", cache=tmp_path / "c.jsonl",
                                     clusters=6, per_cluster=4, headings=headings))
    plan = quality.crossfit_plan(rows)
    routers = {name: default_pool().subset(ids).clusters(6, 4) for name, ids in plan.values()}
    for key, text in captured["inputs"]:
        messages, extra = captured["messages_for"](key, text)
        name, _ = plan[key.removeprefix("laymaker-")]
        heading, sentence = heading_split(text) if headings else ("", text)
        assert messages == cluster_messages(sentence, router=routers[name], k=k)
        assert extra.get("heading", "") == heading
    if headings:  # some of the 40 rows start with a heading; the version says it is copied
        assert any(heading_split(text)[0] for _, text in captured["inputs"])
        assert captured["variant"]["prompt_version"].endswith("k0h")
