"""report.html: one self-contained page per run and per sweep.

Everything the run wrote that a team reads, on one page to share: the model, where the
time goes, placement with the rule each CPU kernel failed, every kernel (a table that
sorts and filters with JavaScript and reads as a plain table without it), the plots
(inlined as data: URIs, so the file works offline and when mailed), and quantization per
layer. The sweep page has the summary table and the Pareto plot, each job linked to its
own page. ``python -m pipeline.html_report RUN_OR_SWEEP_DIR`` rewrites a page.
"""

from __future__ import annotations

import base64
import html
import json
import sys
from pathlib import Path
from typing import Any

from pipeline.artifacts import read_csv, write_text
from pipeline.compiler.plan import Kernel, Plan, read_plan
from pipeline.errors import UserError

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:12px}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f3f3f3;cursor:pointer}td.l,th.l{text-align:left}
tr.cpu td{background:#fdecea}img{max-width:100%;border:1px solid #eee;margin:.5em 0}
.kv td:first-child{text-align:left;color:#555}input{margin:.3em 0;padding:3px;width:20em}
"""

SCRIPT = """
(function(){
  var errors=0; window.addEventListener('error',function(){errors++;});
  function sortable(t){
    var ths=t.querySelectorAll('th');
    ths.forEach(function(th,i){th.addEventListener('click',function(){
      var rows=Array.prototype.slice.call(t.tBodies[0].rows);
      var asc=th.dataset.asc!=='1'; th.dataset.asc=asc?'1':'0';
      rows.sort(function(a,b){
        var x=a.cells[i].textContent,y=b.cells[i].textContent;
        var nx=parseFloat(x),ny=parseFloat(y);
        var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);
        return asc?c:-c;});
      rows.forEach(function(r){t.tBodies[0].appendChild(r);});});});
  }
  function filterable(input){
    var t=document.getElementById(input.dataset.table);
    input.addEventListener('input',function(){
      var q=input.value.toLowerCase();
      Array.prototype.forEach.call(t.tBodies[0].rows,function(r){
        r.style.display=r.textContent.toLowerCase().indexOf(q)>=0?'':'none';});});
  }
  window.addEventListener('load',function(){
    document.querySelectorAll('table.sortable').forEach(sortable);
    document.querySelectorAll('input.filter').forEach(filterable);
    var imgs=document.querySelectorAll('img'),ok=0;
    imgs.forEach(function(i){if(i.complete&&i.naturalWidth>0)ok++;});
    document.body.dataset.images=ok+'/'+imgs.length;
    document.body.dataset.errors=String(errors);
    document.body.dataset.ready='yes';
  });
})();
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "-"
    return "-" if value is None else str(value)


def _image(path: Path, alt: str) -> str:
    if not path.is_file():
        return ""
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _table(rows: list[dict[str, Any]], columns: list[str], table_id: str,
           left: tuple[str, ...] = (), row_class: str | None = None,
           links: dict[str, str] | None = None) -> str:
    head = "".join(f'<th class="{"l" if c in left else ""}">{_e(c)}</th>' for c in columns)
    body = []
    for r in rows:
        cls = f' class="{_e(r.get(row_class, ""))}"' if row_class else ""
        cells = []
        for c in columns:
            text = _e(_fmt(r.get(c)))
            if links and c in links and r.get(links[c]):
                text = f'<a href="{_e(r[links[c]])}">{text}</a>'
            cells.append(f'<td class="{"l" if c in left else ""}">{text}</td>')
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return (f'<input class="filter" data-table="{table_id}" placeholder="filter rows">'
            f'<table id="{table_id}" class="sortable"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _kv(pairs: list[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(_fmt(v))}</td></tr>" for k, v in pairs)
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def _json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def _page(title: str, sections: list[str]) -> str:
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{_e(title)}</h1>{''.join(sections)}<script>{SCRIPT}</script></body></html>")


def why_on_cpu(kernel: Kernel) -> str:
    """A CPU kernel's reason: the first NPU rule it failed, or the min-cut's trade (every
    rule passed, but the whole plan is faster with the transfers it saves)."""
    if kernel.target != "cpu":
        return ""
    failed = next((c for c in kernel.checks if not c.passed), None)
    if failed is not None:
        return f"{failed.text} ({failed.detail or ''})"
    if kernel.moved_by_optimizer:
        npu, cpu = kernel.npu_estimate_cycles, kernel.cpu_estimate_cycles
        costs = (f": {cpu:,.0f} CPU cycles against {npu:,.0f} on the NPU plus the "
                 "transfers either side" if npu is not None and cpu is not None else "")
        return ("moved by compile.placement=optimal (every NPU rule passes; the plan is "
                f"faster without the NPU<->CPU transfers it would need){costs}")
    return ""


def _placement(plan: Plan) -> str:
    rows = []
    for k in plan.kernels:
        rows.append({"kernel": k.name, "ops": "+".join(k.op_types), "target": k.target,
                     "precision": k.precision, "cycles": k.cost.total_cycles,
                     "why on the CPU": why_on_cpu(k), "cls": k.target})
    return _table(rows, ["kernel", "ops", "target", "precision", "cycles", "why on the CPU"],
                  "placement", left=("kernel", "ops", "target", "why on the CPU"),
                  row_class="cls")


LLM_HEADLINE = ("ttft_ms", "prefill_tokens_per_s", "decode_tokens_per_s",
                "decode_ms_per_token", "memory_mb", "perplexity_change_pct")


def _language_model(llm: dict | None) -> list[str]:
    """A language model's phases (``simulate/llm.json``): what the time to first token and
    a decode step are made of, and what the memory holds."""
    if not llm:
        return []
    layers, steps = llm["layers"], llm["decode_step_ms"]
    block, prefill = llm["block_ms"], llm["prefill_ms"]
    phases = [
        {"phase": "prefill", "part": f"{layers} x block over {llm['prompt_tokens']} tokens",
         "ms": prefill["layers"]},
        {"phase": "prefill", "part": f"LM head ({llm['lm_head_chunks']} column chunks)",
         "ms": prefill["lm_head"]},
        {"phase": "prefill", "part": "sampling on the host", "ms": prefill["sampling"]},
        {"phase": "prefill", "part": "time to first token", "ms": sum(prefill.values())},
        {"phase": "decode", "part": f"block at context {llm['prompt_tokens'] + 1}",
         "ms": block["decode_first"]},
        {"phase": "decode", "part": f"block at context {llm['kv_context']}",
         "ms": block["decode_last"]},
        {"phase": "decode", "part": f"first step ({layers} blocks + head + sampling)",
         "ms": steps[0]},
        {"phase": "decode", "part": f"last step (token {len(steps)})", "ms": steps[-1]},
        {"phase": "decode", "part": "mean step", "ms": sum(steps) / len(steps)},
    ]
    total = sum(llm["memory_bytes"].values()) or 1
    memory = [{"part": k, "MB": v / 2**20, "share %": 100 * v / total}
              for k, v in llm["memory_bytes"].items()]
    return ["<h2>Language model: phases</h2>",
            _table(phases, ["phase", "part", "ms"], "llm_phases", left=("phase", "part")),
            "<h2>Language model: memory</h2>",
            _table(memory, ["part", "MB", "share %"], "llm_memory", left=("part",))]


def run_page(run_dir: Path) -> str:
    metrics = _json(run_dir / "metrics.json") or {}
    model = _json(run_dir / "export" / "model.json") or {}
    parts = _json(run_dir / "simulate" / "breakdown.json") or {}
    plan_file = run_dir / "compile" / "plan.json"
    plan = read_plan(plan_file) if plan_file.is_file() else None
    sections = ["<h2>Model</h2>", _kv([
        ("name", model.get("name")), ("source", model.get("source")),
        ("nodes", model.get("nodes")), ("MACs", model.get("macs")),
        ("parameters", model.get("parameters")), ("opset", model.get("opset")),
        ("export", model.get("export", {}).get("exporter") if model.get("export") else "-")])]
    headline = [*LLM_HEADLINE, "latency_ms", "latency_ms_low", "latency_ms_high",
                "latency_band_pairs", "latency_band_kind", "latency_band_based_on",
                "throughput_fps", "throughput_ips", "energy_mj",
                "mac_utilization", "sram_hit_rate", "dram_bytes", "fallback_ms",
                "graph_io_ms", "cold_start_ms", "accuracy", "accuracy_float", "accuracy_top1",
                "top1_agreement", "output_cosine", "min_layer_cosine", "quant_float_layers",
                "auto_int8_latency_ms", "auto_latency_cost_ms"]
    sections += ["<h2>Headline metrics</h2>",
                 _kv([(k, metrics[k]) for k in headline if k in metrics])]
    if parts:
        total = sum(parts.values()) or 1.0
        sections += ["<h2>Where the time goes (per frame)</h2>", _table(
            [{"stage": k, "ms": v, "share %": 100 * v / total} for k, v in parts.items()],
            ["stage", "ms", "share %"], "breakdown", left=("stage",))]
    sim = run_dir / "simulate"
    sections += _language_model(_json(sim / "llm.json"))
    sections += ["<h2>Timeline</h2>", _image(sim / "timeline.png", "timeline"),
                 '<p>The same timeline, zoomable: open <code>simulate/trace.json</code> in '
                 '<a href="https://ui.perfetto.dev">ui.perfetto.dev</a> or chrome://tracing.</p>',
                 _image(sim / "roofline.png", "roofline"), _image(sim / "layers.png", "layers")]
    if plan:
        sections += ["<h2>Placement</h2>", _placement(plan)]
    kernels = read_csv(sim / "layers.csv")
    if kernels:
        sections += ["<h2>Kernels</h2>", _table(
            kernels, list(kernels[0]), "kernels", left=("kernel", "ops", "target", "bound",
                                                        "unit", "tiling", "precision"))]
    if (run_dir / "compile" / "auto_curve.png").is_file():
        sections += ["<h2>Automatic mixed precision</h2>",
                     _image(run_dir / "quantize" / "auto_curve.png", "search"),
                     _image(run_dir / "compile" / "auto_curve.png", "accuracy vs latency")]
    quant = read_csv(run_dir / "quantize" / "layers.csv")
    if quant:
        sections += ["<h2>Quantization per layer</h2>",
                     _image(run_dir / "quantize" / "layer_error.png", "layer error"),
                     _table(quant, list(quant[0]), "quant", left=("layer", "op", "tensor"))]
    return _page(f"npuflow run: {model.get('name', run_dir.name)}", sections)


def sweep_page(sweep_dir: Path) -> str:
    rows = read_csv(sweep_dir / "summary.csv")
    for r in rows:
        page = sweep_dir / r["job"] / "report.html"
        r["page"] = f"{r['job']}/report.html" if page.is_file() else ""
    columns = [c for c in ["job", "overrides", "status", "latency_ms", "throughput_fps",
                           "throughput_ips", "energy_mj", "mac_utilization",
                           "accuracy", "accuracy_top1", "output_cosine", "pareto", "reason"]
               if rows and c in rows[0]]
    return _page(f"npuflow sweep: {sweep_dir.name} ({len(rows)} jobs)", [
        "<h2>Pareto plot</h2>", _image(sweep_dir / "pareto.png", "pareto"),
        "<h2>Jobs</h2>", _table(rows, columns, "jobs", left=("job", "overrides", "status",
                                                             "reason"), links={"job": "page"})])


def write_run_report(run_dir: Path) -> Path:
    path = run_dir / "report.html"
    write_text(path, run_page(run_dir))
    return path


def write_sweep_report(sweep_dir: Path) -> Path:
    path = sweep_dir / "report.html"
    write_text(path, sweep_page(sweep_dir))
    return path


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m pipeline.html_report RUN_OR_SWEEP_DIR", file=sys.stderr)
        sys.exit(0 if args and args[0] in ("-h", "--help") else 2)
    target = Path(args[0])
    if (target / "summary.csv").is_file():
        write = write_sweep_report
    elif (target / "metrics.json").is_file():
        write = write_run_report
    else:
        print(f"npuflow: error: '{target}' has neither metrics.json nor summary.csv",
              file=sys.stderr)
        sys.exit(2)
    try:
        print(write(target))
    except UserError as exc:  # e.g. a plan an older npuflow wrote
        print(f"npuflow: error: {exc}", file=sys.stderr)
        sys.exit(2)

if __name__ == "__main__":
    main()
