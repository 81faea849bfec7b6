"""``python -m bench ward``'s report: per configuration the client's TTFT
and E2E with their ratio to the no-worker baseline of the same run, the
re-runs queued and verified, done → verified, and each process's memory
and CPU; and the figures it is built from."""

from __future__ import annotations

from bench.ward import ratios, render, summary


def result(priority, ttft, e2e, verified_s, *, cores=True, load_s=60.0):
    rows = [{"id": f"r{i}", "ttft_ms": t, "e2e_ms": e, "done_at": 10.0 * i, "verification": "pending" if i < 2
             else "not_needed", "verified_s": v, "verification_failed": False, "error": None}
            for i, (t, e, v) in enumerate(zip(ttft, e2e, verified_s))]
    rows.append({"id": "x", "ttft_ms": None, "e2e_ms": 5.0, "done_at": None, "verification": None,
                 "verified_s": None, "verification_failed": False, "error": "error:busy"})
    processes = {"daphne": 2.1} | ({"worker": 1.5, "engine core": 10.2} if priority and cores else {})
    return {"rows": rows, "priority": priority, "load_s": load_s, "drain_s": 30.0, "peak_rss_gib": processes,
            "cpu_s_during_load": {k: 50.0 for k in processes} | {"bench clients": 3.0, "other": 0.5},
            "policies": {"worker": "SCHED_IDLE", "engine core": "SCHED_IDLE"} if priority else {},
            "worker_ready_s": 70.0 if priority else None}


def test_each_configuration_is_compared_with_the_no_worker_baseline_of_the_same_run():
    summaries = [summary("no worker", result(None, [100, 200, 300], [1000, 2000, 3000], [None] * 3)),
                 summary("idle", result("idle", [200, 400, 600], [1000, 2000, 3000], [5.0, None, None]))]
    idle = summaries[1]
    assert (idle["translations"], idle["errors"], idle["error_samples"]) == (3, 1, ["error:busy"])
    assert (idle["reruns_queued"], idle["verified"], idle["verified_p50_s"]) == (2, 1, 5.0)
    assert idle["verified_during_load"] == 1  # done at 0 s + 5 s, inside the 60 s load
    assert ratios(summaries)["idle"] == {"ttft_p50": 2.0, "ttft_p95": 2.0, "e2e_p50": 1.0, "e2e_p95": 1.0,
                                         "output_tps_p50": None}  # no token counts in these rows
    assert idle["waiting_at_end"] == 1 and idle["verified_max_s"] == 5.0
    report = {"command": "python -m bench ward", "host": "`vm`, 2 cores", "engine": "llamacpp, m.gguf, q4_k_m",
              "rerun_engine": "vLLM float32", "clients": 8, "per_client": 3, "drain_s": 30.0,
              "summary": summaries, "ratios": ratios(summaries), "reading": "Reading: idle costs nothing."}
    text = render(report)
    assert ("| no worker | – | 3 (1) | 200.0 / 290.0 | 1.0× / 1.0× | 2000.0 / 2900.0 | 1.0× / 1.0× | 2 | – | – / – "
            "| 60.0 |") in text
    assert ("| idle | SCHED_IDLE | 3 (1) | 400.0 / 580.0 | 2.0× / 2.0× | 2000.0 / 2900.0 | 1.0× / 1.0× | 2 | "
            "1 / 0 (1) | 5.0 / 5.0 | 60.0 |") in text
    assert "| idle | 2.1 | 1.5 | 10.2 | 50.0 | 50.0 | 50.0 | 3.0 | 0.5 |" in text
    assert "| no worker | 2.1 | – | – | 50.0 | – | – | 3.0 | 0.5 |" in text
    assert "idle: worker ready 70.0 s after start, engine core SCHED_IDLE" in text
    assert "Errors: no worker: error:busy; idle: error:busy." in text
    assert text.endswith("Reading: idle costs nothing.\n")


def test_a_paced_run_reports_the_output_rate_and_the_texts_still_waiting():
    base = result(None, [100, 100, 100], [1100, 2100, 1100], [None] * 3)
    slow = result("idle", [100, 100, 100], [2100, 4100, 2100], [30.0, None, None])
    for rows in (base["rows"], slow["rows"]):
        for row in rows[:3]:
            row["tokens_out"] = 21  # 20 tokens after the first
    slow["rows"][1]["verification_failed"] = True
    summaries = [summary("no worker", base), summary("idle", slow)]
    assert summaries[0]["output_tps_p50"] == 20.0  # 20 tokens in 1 s
    assert summaries[1]["output_tps_p50"] == 10.0
    assert ratios(summaries)["idle"]["output_tps_p50"] == 0.5
    assert summaries[1]["waiting_at_end"] == 0  # one verified, one failed
    report = {"command": "python -m bench ward --pace-s 30", "host": "`vm`", "engine": "llamacpp",
              "rerun_engine": "vLLM float32", "clients": 1, "per_client": 20, "drain_s": 300.0,
              "pace_s": 30.0, "max_load_s": 600.0, "summary": summaries, "ratios": ratios(summaries)}
    text = render(report)
    assert text.startswith("# A ward at a clinician's pace")
    assert "one every 30.0 s each, for 600.0 s" in text
    assert "| idle | 10.0 (0.5×) | 30.0 | 0 |" in text
