# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The benchmark's report: raw measurements -> normalized JSON, Markdown and plots.

build() turns what playbooks/benchmark.yml collected into the report dict
(the JSON), markdown() renders it beside the recipe's figures, plot_data()
says what each plot shows, and render_plots() draws it with matplotlib,
which is imported only there (the controller needs it; the nodes do not).
"""

from __future__ import annotations

import json

from ansible_collections.laguna.spark.plugins.module_utils import bench_stats, vllm_log

SCHEMA = "laguna.spark.benchmark/1"

# The recipe's figures (laguna-s-2.1-fp8-two-sparks): 2x DGX Spark (GB10),
# TP2, vLLM 0.25.1, --enforce-eager, W4A16 DFlash draft, code prompts.
RECIPE = {
    "source": "Laguna-S 2.1 FP8 on 2x DGX Spark (TP2, vLLM 0.25.1, W4A16 DFlash draft)",
    "k": 6,
    "prompt_tokens": 2048,
    "decode_tok_s": 60.9,
    "baseline_tok_s": 26.5,
    "speedup": 2.3,
    "acceptance_rate": 0.622,
    "per_position": [0.89, 0.76, 0.65, 0.55, 0.48, 0.41],
    # "3.73 tokens/step" = 0.622 x 6: accepted draft tokens per step. vLLM's
    # mean acceptance length adds the bonus token (4.73).
    "accepted_per_draft": 3.73,
    "ttft_s": {"2048": 0.7, "32768": 8.9, "131072": 47.0, "253952": 118.0},
    "memory_used_gib": {"head": 81.0, "worker": 74.0},
    "kv_cache_tokens": 273095,
    "max_concurrency": 1.04,
    "max_model_len": 262144,
    "draft_kernel": {"kernel": "MarlinLinearKernel", "scheme": "CompressedTensorsWNA16"},
    "greedy_identical": True,
}

PLOTS = ("tok_s_vs_k", "acceptance_by_position", "ttft_vs_prompt")
STANDIN_MARK = "laguna.standin"


def _is_standin(raw):
    if raw.get("standin") is not None:
        return bool(raw["standin"])
    versions = [raw.get("server_version")]
    for step in raw.get("steps") or []:
        versions.append((step.get("decode") or {}).get("server_version"))
    for item in raw.get("ttft") or []:
        versions.append(item.get("server_version"))
    return any(STANDIN_MARK in (v or "") for v in versions)


def _first(*values):
    for value in values:
        if value is not None:
            return value
    return None


def _step_name(step):
    return "no draft" if not step.get("speculative") else "k=%s" % step.get("k")


def _decode_entry(step, baseline_median):
    decode = step.get("decode") or {}
    rate = decode.get("decode_tok_s_stats") or bench_stats.summary(
        [r.get("decode_tok_s") for r in decode.get("runs") or []])
    ttft = decode.get("ttft_s_stats") or bench_stats.summary([r.get("ttft_s") for r in decode.get("runs") or []])
    spec = decode.get("spec") or bench_stats.spec_window({}, {})
    ok = bool(step.get("ok", True)) and rate.get("median") is not None
    return {
        "name": _step_name(step),
        "speculative": bool(step.get("speculative")),
        "k": step.get("k") if step.get("speculative") else None,
        "ok": ok,
        "error": step.get("error"),
        "tok_s": rate,
        "ttft_s": ttft,
        "prompt_tokens": decode.get("prompt_tokens"),
        "prompt_exact": decode.get("prompt_exact"),
        "completion_tokens": decode.get("completion_tokens"),
        "spec": spec,
        "speedup": bench_stats.ratio(rate.get("median"), baseline_median) if step.get("speculative") else None,
    }


def _identity(steps):
    baseline = next((s for s in steps if not s.get("speculative") and (s.get("greedy") or {}).get("outputs")), None)
    result = {"checked": False, "all_identical": None, "configs": [],
              "reason": None if baseline else "no greedy outputs of a run without the draft to compare with"}
    if baseline is None:
        return result
    reference = baseline["greedy"]["outputs"]
    for step in steps:
        outputs = (step.get("greedy") or {}).get("outputs")
        if not step.get("speculative") or not outputs:
            continue
        prompts = []
        for index, ref in enumerate(reference):
            out = outputs[index] if index < len(outputs) else {}
            cmp = bench_stats.compare_tokens(ref.get("token_ids"), out.get("token_ids"))
            cmp.update(index=index, prompt=ref.get("prompt", "")[:120],
                       reference_digest=bench_stats.token_digest(ref.get("token_ids")),
                       digest=bench_stats.token_digest(out.get("token_ids")))
            prompts.append(cmp)
        result["configs"].append({"name": _step_name(step), "k": step.get("k"), "prompts": prompts,
                                  "all_identical": all(p["identical"] for p in prompts)})
    if result["configs"]:
        result["checked"] = True
        result["all_identical"] = all(c["all_identical"] for c in result["configs"])
    return result


def build(raw):
    """The report dict (what results.json holds) from the benchmark's raw results."""
    steps = list(raw.get("steps") or [])
    baseline = next((s for s in steps if not s.get("speculative") and s.get("ok", True)), None)
    baseline_median = None
    if baseline is not None:
        baseline_median = ((baseline.get("decode") or {}).get("decode_tok_s_stats") or {}).get("median")
    decode = [_decode_entry(s, baseline_median) for s in steps]
    decode.sort(key=lambda d: (d["speculative"], d["k"] or 0))
    measured = [d for d in decode if d["speculative"] and d["ok"]]
    best = max(measured, key=lambda d: d["tok_s"]["median"]) if measured else None
    ttft = []
    for item in raw.get("ttft") or []:
        stats = item.get("ttft_s_stats") or bench_stats.summary([r.get("ttft_s") for r in item.get("runs") or []])
        ttft.append({"target_prompt_tokens": _first(item.get("target_prompt_tokens"), item.get("item")),
                     "prompt_tokens": item.get("prompt_tokens"),
                     "exact": bool(item.get("prompt_exact")),
                     "skipped": bool(item.get("skipped")),
                     "failed": bool(item.get("failed")),
                     "msg": _first(item.get("msg"), item.get("skip_reason"))
                     if item.get("skipped") or item.get("failed") else None,
                     "ttft_s": stats})
    ttft.sort(key=lambda t: t["target_prompt_tokens"] or 0)
    memory = []
    for node in raw.get("memory") or []:
        entry = {"host": node.get("host"), "role": node.get("role")}
        entry.update(bench_stats.meminfo(node.get("meminfo")))
        memory.append(entry)
    servers = [_first((s.get("decode") or {}).get("server_version")) for s in steps]
    failures = [{"step": d["name"], "error": d["error"]} for d in decode if not d["ok"]]
    failures += [{"step": "ttft %s" % t["target_prompt_tokens"], "error": t["msg"]} for t in ttft if t["failed"]]
    failures += [{"step": f.get("step"), "error": f.get("error")} for f in raw.get("failures") or []]
    report = {
        "schema": SCHEMA,
        "standin": _is_standin(raw),
        "generated_at": raw.get("generated_at"),
        "model": _first(raw.get("model"), *[(s.get("decode") or {}).get("model") for s in steps]),
        "server_version": _first(raw.get("server_version"), *servers),
        "hosts": raw.get("hosts") or {},
        "configured": raw.get("configured") or {},
        "settings": raw.get("settings") or {},
        "decode": decode,
        "best_k": best["k"] if best else None,
        "ttft": ttft,
        "identity": _identity(steps),
        "memory": memory,
        "vllm_log": vllm_log.report(raw.get("vllm_log") or []),
        "failures": failures,
        "recipe": RECIPE,
    }
    report["comparison"] = comparison(report)
    return report


# -- formatting ----------------------------------------------------------------
def _num(value, digits=1, suffix=""):
    if value is None:
        return "—"
    return ("%." + str(digits) + "f%s") % (value, suffix)


def _pct(value, digits=1):
    return "—" if value is None else ("%." + str(digits) + "f%%") % (value * 100.0)


def _tokens(n):
    if n is None:
        return "—"
    return "%dK" % (n // 1024) if n % 1024 == 0 else "{:,}".format(n)


def _spread(stats, digits=1):
    if not stats or stats.get("median") is None:
        return "—"
    if stats.get("n", 0) < 2:
        return _num(stats["median"], digits)
    return "%s (%s–%s, n=%d)" % (_num(stats["median"], digits), _num(stats["min"], digits),
                                 _num(stats["max"], digits), stats["n"])


def _positions(values, digits=2):
    return " / ".join(("%." + str(digits) + "f") % v for v in values) if values else "—"


def _entry(report, k=None, speculative=True):
    for d in report["decode"]:
        if d["speculative"] == speculative and (not speculative or d["k"] == k) and d["ok"]:
            return d
    return None


def comparison(report):
    """Rows of the recipe-versus-this-run table: figure, recipe, this run."""
    r = report["recipe"]
    at_k = _entry(report, r["k"])
    base = _entry(report, speculative=False)
    rows = [
        ("decode tok/s, k=%d, %d-token prompt" % (r["k"], r["prompt_tokens"]), _num(r["decode_tok_s"]),
         _spread(at_k["tok_s"]) if at_k else "not measured"),
        ("decode tok/s without the draft", _num(r["baseline_tok_s"]), _spread(base["tok_s"]) if base else "not measured"),
        ("speed-up at k=%d" % r["k"], _num(r["speedup"], 1, "x"),
         _num(at_k["speedup"], 2, "x") if at_k and at_k["speedup"] else "—"),
        ("draft acceptance at k=%d" % r["k"], _pct(r["acceptance_rate"]),
         _pct(at_k["spec"]["acceptance_rate"]) if at_k else "—"),
        ("acceptance per position", _positions(r["per_position"]),
         _positions(at_k["spec"]["per_position"]) if at_k else "—"),
        ("tokens/step (accepted draft tokens per step)", _num(r["accepted_per_draft"], 2),
         _num(at_k["spec"]["accepted_per_draft"], 2) if at_k else "—"),
    ]
    by_len = {t["target_prompt_tokens"]: t for t in report["ttft"]}
    for length, seconds in sorted(r["ttft_s"].items(), key=lambda kv: int(kv[0])):
        t = by_len.get(int(length))
        measured = "not measured" if t is None else (
            "skipped: %s" % t["msg"] if t["skipped"] else ("failed" if t["failed"] else _spread(t["ttft_s"], 2) + " s"))
        rows.append(("TTFT at %s" % _tokens(int(length)), _num(seconds) + " s", measured))
    for role in ("head", "worker"):
        nodes = [m for m in report["memory"] if m["role"] == role]
        rows.append(("memory used, %s" % role, "~%d GiB" % r["memory_used_gib"][role],
                     ", ".join("%s: %s of %s GiB" % (m["host"], _num(m["used_gib"]), _num(m["total_gib"], 0))
                               for m in nodes) or "—"))
    log = report["vllm_log"]
    rows.append(("KV pool", "{:,} tokens ({:.2f}x)".format(r["kv_cache_tokens"], r["max_concurrency"]),
                 ("{:,} tokens ({}x)".format(log["kv_cache_tokens"], _num(log["max_concurrency"], 2))
                  if log["kv_cache_tokens"] is not None else "not in the log")))
    kernels = ["%s for %s" % (k["kernel"], k["scheme"]) for k in log["kernels"]]
    rows.append(("draft kernel", "%s for %s" % (r["draft_kernel"]["kernel"], r["draft_kernel"]["scheme"]),
                 ", ".join(kernels) or "not in the log"))
    identity = report["identity"]
    if identity["checked"]:
        total = sum(len(c["prompts"]) for c in identity["configs"])
        same = sum(sum(1 for p in c["prompts"] if p["identical"]) for c in identity["configs"])
        measured = "%d of %d outputs token-identical (%s)" % (
            same, total, ", ".join(c["name"] for c in identity["configs"]))
    else:
        measured = "not checked"
    rows.append(("greedy output with the draft", "token-identical", measured))
    return [{"figure": f, "recipe": a, "measured": b} for f, a, b in rows]


def first_line(report):
    if report["standin"]:
        return ("**STAND-IN RUN, not a measurement of Laguna-S 2.1:** every figure in the \"this run\" "
                "column comes from the laguna-spark test stand-in `vllm serve` (server version %s) and "
                "its speed model, and checks the benchmark's plumbing and arithmetic only."
                % (report["server_version"] or "unknown"))
    return "# Laguna-S 2.1 FP8 benchmark: %s on %s" % (
        report["model"] or "?", ", ".join([report["hosts"].get("head") or "?"] + list(report["hosts"].get("workers") or [])))


def markdown(report, plot_files=None):
    run = "this run (stand-in)" if report["standin"] else "this run"
    out = [first_line(report), ""]
    if report["standin"]:
        out += ["# Laguna-S 2.1 FP8 benchmark (stand-in): %s" % (report["model"] or "?"), ""]
    settings, configured = report["settings"], report["configured"]
    out += [
        "Model `%s`, vLLM %s; generated %s. Configured server: %s. Hosts: %s." % (
            report["model"] or "?", report["server_version"] or "?", report["generated_at"] or "?",
            ("k=%s" % configured.get("k")) if configured.get("speculative") else "no draft",
            ", ".join([report["hosts"].get("head") or "?"] + list(report["hosts"].get("workers") or []))),
        "",
        "## Against the recipe",
        "",
        "The recipe column quotes the recipe's figures (%s); the other column is what this run measured."
        % RECIPE["source"],
        "",
        "| figure | recipe | %s |" % run,
        "|---|---|---|",
    ]
    out += ["| %s | %s | %s |" % (row["figure"], row["recipe"], row["measured"]) for row in report["comparison"]]
    out += ["", "## Decode by k", "",
            "Single stream, %s-token code prompt, %s tokens per request, temperature 0, "
            "%s warm-up request(s) after each restart, then %s measured; decode tok/s = "
            "(completion_tokens - 1) / (t_last_token - t_first_token). Acceptance from the "
            "/metrics counters over the measured requests only." % (
                settings.get("prompt_tokens", "?"), settings.get("max_tokens", "?"),
                settings.get("warmup", "?"), settings.get("runs", "?")),
            "",
            "| config | tok/s median | min–max | stdev | speed-up | acceptance | tokens/step | "
            "mean acceptance length | TTFT median |",
            "|---|---|---|---|---|---|---|---|---|"]
    for d in report["decode"]:
        if not d["ok"]:
            out.append("| %s | failed: %s | | | | | | | |" % (d["name"], (d["error"] or "?").replace("|", "/")[:200]))
            continue
        s = d["tok_s"]
        out.append("| %s%s | %s | %s–%s | %s | %s | %s | %s | %s | %s s |" % (
            d["name"], " (best)" if d["k"] is not None and d["k"] == report["best_k"] else "",
            _num(s["median"]), _num(s["min"]), _num(s["max"]), _num(s["stdev"], 2),
            _num(d["speedup"], 2, "x") if d["speedup"] else "—",
            _pct(d["spec"]["acceptance_rate"]), _num(d["spec"]["accepted_per_draft"], 2),
            _num(d["spec"]["mean_acceptance_length"], 2), _num(d["ttft_s"]["median"], 3)))
    spec_rows = [d for d in report["decode"] if d["ok"] and d["spec"]["per_position"]]
    if spec_rows:
        width = max([len(d["spec"]["per_position"]) for d in spec_rows] + [len(RECIPE["per_position"])])
        out += ["", "## Acceptance by draft position", "",
                "Accepted tokens at each position / drafts, over the measured requests.", "",
                "| config | " + " | ".join("pos %d" % (i + 1) for i in range(width)) + " |",
                "|---|" + "---|" * width]
        for d in spec_rows:
            cells = ["%.3f" % v for v in d["spec"]["per_position"]] + [""] * (width - len(d["spec"]["per_position"]))
            out.append("| %s | %s |" % (d["name"], " | ".join(cells)))
        cells = ["%.2f" % v for v in RECIPE["per_position"]] + [""] * (width - len(RECIPE["per_position"]))
        out.append("| recipe, k=%d | %s |" % (RECIPE["k"], " | ".join(cells)))
    out += ["", "## Time to first token by prompt length", "",
            "One request per run at each length, each with a prompt of its own (no cached prefix); "
            "prompt lengths are exact as the served model's tokenizer counts them (/tokenize).", "",
            "| prompt tokens | served count | exact | TTFT median | min–max | recipe |", "|---|---|---|---|---|---|"]
    for t in report["ttft"]:
        recipe = RECIPE["ttft_s"].get(str(t["target_prompt_tokens"]))
        if t["skipped"] or t["failed"]:
            out.append("| %s | %s: %s | | | | %s |" % (
                "{:,}".format(t["target_prompt_tokens"]), "skipped" if t["skipped"] else "failed",
                (t["msg"] or "").replace("|", "/")[:200], _num(recipe) + " s" if recipe else "—"))
            continue
        out.append("| %s | %s | %s | %s s | %s–%s s | %s |" % (
            "{:,}".format(t["target_prompt_tokens"]),
            "{:,}".format(int(t["prompt_tokens"])) if t["prompt_tokens"] is not None else "—",
            "yes" if t["exact"] else "no", _num(t["ttft_s"]["median"], 3), _num(t["ttft_s"]["min"], 3),
            _num(t["ttft_s"]["max"], 3), _num(recipe) + " s" if recipe else "—"))
    identity = report["identity"]
    out += ["", "## Greedy identity", ""]
    if not identity["checked"]:
        out.append("Not checked: %s." % (identity["reason"] or "no outputs with the draft"))
    else:
        out += ["Temperature 0, the same prompts with and without the draft; the token ids must be identical "
                "(the recipe's \"lossless\" claim). %s" % (
                    "All identical." if identity["all_identical"] else "**Some outputs differ.**"), "",
                "| config | prompt | identical | first difference | tokens (draft / no draft) |",
                "|---|---|---|---|---|"]
        for config in identity["configs"]:
            for p in config["prompts"]:
                out.append("| %s | %d: %s | %s | %s | %d / %d |" % (
                    config["name"], p["index"], p["prompt"][:60].replace("|", "/").replace("\n", " "),
                    "yes" if p["identical"] else "**no**",
                    "—" if p["first_difference"] is None else "token %d" % p["first_difference"],
                    p["tokens"], p["reference_tokens"]))
    out += ["", "## Memory per node", "", "used = MemTotal - MemAvailable (as `free` counts), with the configured server up.",
            "", "| host | role | used GiB | total GiB | recipe used |", "|---|---|---|---|---|"]
    for m in report["memory"]:
        out.append("| %s | %s | %s | %s | ~%s GiB |" % (
            m["host"], m["role"], _num(m["used_gib"]), _num(m["total_gib"]),
            _num(RECIPE["memory_used_gib"].get(m["role"]), 0)))
    log = report["vllm_log"]
    out += ["", "## vLLM log", ""]
    out += ["    " + line for line in log["lines"]] or ["No KV-pool or kernel lines found in the vLLM log."]
    if report["failures"]:
        out += ["", "## Failures", ""]
        out += ["- %s: %s" % (f["step"], f["error"]) for f in report["failures"]]
    if plot_files:
        out += ["", "## Plots", ""]
        out += ["![%s](%s)" % (name, path) for name, path in plot_files]
    return "\n".join(out) + "\n"


# -- plots ---------------------------------------------------------------------
def plot_data(report):
    """What each plot shows: titles, axes and the series with their values."""
    mark = " (STAND-IN)" if report["standin"] else ""
    run = "this run (stand-in)" if report["standin"] else "this run"
    spec = [d for d in report["decode"] if d["speculative"] and d["ok"]]
    base = _entry(report, speculative=False)
    points = ([(0, base["tok_s"])] if base else []) + [(d["k"], d["tok_s"]) for d in spec]
    tok_s = {
        "title": "Single-stream decode vs k%s" % mark,
        "xlabel": "draft tokens per step k (0 = no draft)", "ylabel": "decode tok/s",
        "series": [{"label": run, "x": [k for k, _s in points], "y": [s["median"] for _k, s in points],
                    "low": [s["min"] for _k, s in points], "high": [s["max"] for _k, s in points]},
                   {"label": "recipe", "x": [0, RECIPE["k"]],
                    "y": [RECIPE["baseline_tok_s"], RECIPE["decode_tok_s"]]}],
    }
    accept = {
        "title": "Draft acceptance by position%s" % mark,
        "xlabel": "draft position", "ylabel": "accepted / drafts",
        "series": [{"label": "%s, %s" % (run, d["name"]), "x": list(range(1, len(d["spec"]["per_position"]) + 1)),
                    "y": list(d["spec"]["per_position"])} for d in spec if d["spec"]["per_position"]]
        + [{"label": "recipe, k=%d" % RECIPE["k"], "x": list(range(1, len(RECIPE["per_position"]) + 1)),
            "y": list(RECIPE["per_position"])}],
    }
    done = [t for t in report["ttft"] if not t["skipped"] and not t["failed"] and t["ttft_s"]["median"] is not None]
    ttft = {
        "title": "Time to first token vs prompt length%s" % mark,
        "xlabel": "prompt tokens", "ylabel": "TTFT (s)",
        "series": [{"label": run, "x": [t["target_prompt_tokens"] for t in done],
                    "y": [t["ttft_s"]["median"] for t in done], "low": [t["ttft_s"]["min"] for t in done],
                    "high": [t["ttft_s"]["max"] for t in done]},
                   {"label": "recipe", "x": sorted(int(k) for k in RECIPE["ttft_s"]),
                    "y": [RECIPE["ttft_s"][str(k)] for k in sorted(int(k) for k in RECIPE["ttft_s"])]}],
    }
    return {"tok_s_vs_k": tok_s, "acceptance_by_position": accept, "ttft_vs_prompt": ttft}


def render_plots(report, paths):
    """Draw each plot of plot_data() to paths[name] as PNG; the data goes in the PNG's Description."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    data = plot_data(report)
    for name in PLOTS:
        plot = data[name]
        figure, axes = pyplot.subplots(figsize=(7, 4.5), dpi=100)
        try:
            for series in plot["series"]:
                recipe = series["label"].startswith("recipe")
                style = dict(linestyle="--" if name == "acceptance_by_position" or name == "ttft_vs_prompt" else "none",
                             marker="s", color="0.45") if recipe else dict(marker="o")
                if not series["x"]:
                    continue
                if "low" in series and not recipe:
                    errors = [[y - lo for y, lo in zip(series["y"], series["low"])],
                              [hi - y for y, hi in zip(series["y"], series["high"])]]
                    axes.errorbar(series["x"], series["y"], yerr=errors, capsize=3, label=series["label"], **style)
                else:
                    axes.plot(series["x"], series["y"], label=series["label"], **style)
            if name == "ttft_vs_prompt":
                axes.set_xscale("log", base=2)
                axes.set_yscale("log")
            axes.set_title(plot["title"])
            axes.set_xlabel(plot["xlabel"])
            axes.set_ylabel(plot["ylabel"])
            axes.grid(True, alpha=0.3)
            axes.legend(fontsize="small")
            figure.tight_layout()
            figure.savefig(paths[name], format="png", metadata={
                "Title": plot["title"], "Software": "laguna.spark bench_report",
                "Description": json.dumps(plot, sort_keys=True)})
        finally:
            pyplot.close(figure)
    return data
