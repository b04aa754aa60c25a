"""scripts/report.py: the HTML report of a run record, alone and against a baseline, parsed back with
html.parser. No GPU, no torch."""
import html.parser
import json
import pathlib
import sys

import pytest

import synthetic_records as sr

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import compare  # noqa: E402
import report  # noqa: E402

pytestmark = pytest.mark.no_detops_library

SECTIONS = ["header", "provenance", "correctness", "time-chart", "bandwidth-chart", "benchmarks"]


class Page(html.parser.HTMLParser):
    """Collects every tag, the text inside each section (by id), the table rows' ids and svg titles."""

    def __init__(self):
        super().__init__()
        self.tags = []
        self.section_text = {}
        self.stack = []          # ids of the open sections/header
        self.row_ids = []
        self.svg_titles = []
        self._in_title = False
        self._svg_depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag in ("section", "header"):
            self.stack.append(a.get("id", "?"))
            self.section_text.setdefault(self.stack[-1], "")
        if tag in ("td", "th", "tr", "p", "div", "h2", "h3", "span"):  # keep cells' texts apart
            for sid in self.stack:
                self.section_text[sid] += " "
        if tag == "tr" and a.get("id"):
            self.row_ids.append(a["id"])
        if tag == "svg":
            self._svg_depth += 1
        if tag == "title" and self._svg_depth:
            self._in_title = True
            self.svg_titles.append("")

    def handle_endtag(self, tag):
        if tag in ("section", "header") and self.stack:
            self.stack.pop()
        if tag == "svg":
            self._svg_depth -= 1
        if tag == "title":
            self._in_title = False

    def handle_data(self, data):
        for sid in self.stack:
            self.section_text[sid] += data
        if self._in_title:
            self.svg_titles[-1] += data


def parse(path):
    p = Page()
    p.feed(pathlib.Path(path).read_text())
    p.close()
    return p


@pytest.fixture()
def demo(tmp_path):
    return sr.write_demo(tmp_path / "records")


def all_keys(record_path):
    return sorted(compare.extract_benchmarks(compare.load_record(record_path)))


def test_report_of_one_record(demo, tmp_path):
    _, cand = demo
    out = tmp_path / "r.html"
    assert report.main([str(cand), "-o", str(out)]) == 0
    page = parse(out)
    for s in SECTIONS:
        assert s in page.section_text, f"section {s} missing"
    assert "comparison" not in page.section_text
    prov = page.section_text["provenance"]
    for fact in ("NVIDIA H200", "sm_90", "132 SMs", "580.65.06", "13.0", "2.11.0", "fedcba987654", "cupti",
                 "4.25 TB/s", "1755", "cold (flushed before each sample)", "complete"):
        assert fact in prov, fact
    corr = page.section_text["correctness"]
    assert "29 passed" in corr and "1 failed" in corr and "1 skipped" in corr
    assert "Failing tests (1)" in corr and "roi_pool.forward.box_head_1000.bf16.cuda" in corr

    keys = all_keys(cand)
    assert len(keys) == 21
    assert sorted(page.row_ids) == sorted("bench-" + k.replace("/", "-") for k in keys)
    for k in keys:  # in both charts
        assert sum(t.startswith(k + ":") for t in page.svg_titles) == 2, k
    assert sum(1 for tag, _ in page.tags if tag == "svg") == 2


def test_report_with_baseline(demo, tmp_path):
    base, cand = demo
    out = tmp_path / "r.html"
    assert report.main([str(cand), "--baseline", str(base), "-o", str(out)]) == 0
    page = parse(out)
    assert "comparison" in page.section_text
    comp = page.section_text["comparison"]
    assert "1 SLOWER" in comp and "1 FASTER" in comp and "Regression" in comp
    assert "roi_pool.forward.box_head_1000.bf16.cuda" in comp and "now fails" in comp
    keys = all_keys(cand)
    for k in keys:  # time chart, bandwidth chart, ratio chart
        assert sum(t.startswith(k + ":") for t in page.svg_titles) == 3, k
    slower = next(t for t in page.svg_titles if t.startswith("roi_align/faster_rcnn_box_head_1000/fp16/fwd:")
                  and "ratio" in t)
    assert "SLOWER" in slower and "p 4.1e-05" in slower
    table = page.section_text["benchmarks"]
    assert "SLOWER" in table and "FASTER" in table


def test_report_is_self_contained(demo, tmp_path):
    base, cand = demo
    out = tmp_path / "r.html"
    report.main([str(cand), "--baseline", str(base), "-o", str(out)])
    page = parse(out)
    tags = {tag for tag, _ in page.tags}
    assert "script" not in tags and "link" not in tags and "img" not in tags and "iframe" not in tags
    for tag, attrs in page.tags:
        for name in ("src", "href"):
            assert name not in attrs or not attrs[name].startswith(("http", "//")), (tag, attrs)
    assert "@import" not in out.read_text() and "url(" not in out.read_text()


def test_report_escapes_record_text(tmp_path):
    rec = sr.make_record([("roi_align", "tiny", "fp32", "fwd", 0.1)])
    rec["benchmarks"][10]["detops"]["shape"] = "x[<b>bold</b>] & rois"
    path = sr.write(tmp_path / "rec.json", rec)
    out = tmp_path / "r.html"
    assert report.main([str(path), "-o", str(out)]) == 0
    page = parse(out)
    text = out.read_text()
    assert "<b>bold</b>" not in text and "&lt;b&gt;bold&lt;/b&gt;" in text
    assert "x[<b>bold</b>] & rois" in page.section_text["benchmarks"]


def test_report_of_a_plain_google_benchmark_record(tmp_path):
    rec = sr.make_record([("nms", "boxes_1k", "fp32", "fwd", 0.45)])
    del rec["context"]["detops"], rec["context"]["detops_schema_version"], rec["correctness"]
    rec["benchmarks"] = [e for e in rec["benchmarks"] if e["run_type"] == "iteration"]
    path = sr.write(tmp_path / "gb.json", rec)
    out = tmp_path / "r.html"
    assert report.main([str(path), "-o", str(out)]) == 0
    page = parse(out)
    assert page.row_ids == ["bench-nms-boxes_1k-fp32-fwd"]
    assert "no correctness results" in page.section_text["correctness"]
    assert "no bandwidth figures" in page.section_text["bandwidth-chart"]


def test_report_refuses_incomparable_and_invalid_records(demo, tmp_path, capsys):
    base, cand = demo
    other = json.loads(pathlib.Path(base).read_text())
    other["context"]["detops"]["gpu"]["name"] = "NVIDIA B200"
    other_path = sr.write(tmp_path / "other.json", other)
    assert report.main([str(cand), "--baseline", str(other_path), "-o", str(tmp_path / "x.html")]) == 2
    assert "different GPU models" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
    pytest.importorskip("jsonschema", reason="jsonschema not installed: schema validation skipped")
    broken = json.loads(pathlib.Path(cand).read_text())
    broken["context"]["detops"]["timer"] = "stopwatch"
    broken_path = sr.write(tmp_path / "broken.json", broken)
    assert report.main([str(broken_path), "-o", str(tmp_path / "y.html")]) == 2
    assert "context/detops/timer" in capsys.readouterr().err


def test_report_cross_build_shows_labels_and_output_movement(tmp_path):
    tests = [sr.correctness_test("roi_align.forward.tiny.fp32.cuda", atol=1e-5, rtol=1e-5)]
    base = sr.make_record([("roi_align", "tiny", "fp32", "fwd", 0.1)], tests=tests, seed=1)
    cand = sr.make_record([("roi_align", "tiny", "fp32", "fwd", 0.1)], tests=tests, seed=2, cuda=13010, nvcc="13.1.20")
    paths = []
    for name, rec, values in (("b", base, [1.0, 2.0]), ("c", cand, [1.0, 2.00001])):
        rec["outputs"] = {"dir": "outputs", "index": "outputs/index.json"}
        p = sr.write(tmp_path / name / "record.json", rec)
        (p.parent / "outputs").mkdir()
        (p.parent / "outputs" / "0.f64").write_bytes(bytes(memoryview(__import__("numpy").asarray(values, "<f8"))))
        (p.parent / "outputs" / "index.json").write_text(json.dumps({"roi_align.forward.tiny.fp32.cuda": {
            "file": "0.f64", "shape": [2], "dtype": "fp32", "elements_saved": 2, "subsampled": False}}))
        paths.append(p)
    out = tmp_path / "r.html"
    assert report.main([str(paths[1]), "--baseline", str(paths[0]), "--cross-build", "-o", str(out)]) == 0
    comp = parse(out).section_text["comparison"]
    assert "CUDA 13.0 / driver 580.65.06 / torch 2.11.0 → CUDA 13.1 / driver 580.65.06 / torch 2.11.0" in comp
    assert "Outputs between the builds" in comp
    # |diff| 1e-5 over the tolerance 1e-5 + 1e-5 * 2 = 3e-5 at the moved element
    assert "roi_align cuda fp32 1 0 1e-05 0.333 0" in " ".join(comp.split())


def test_report_shows_peers_table_and_speedup_bars(tmp_path):
    rec = sr.make_record(sr.demo_benchmarks(), sr.demo_tests(), seed=1)
    rec["peers"] = sr.demo_peers() + [sr.peer_entry("nms", "boxes_1000", "fp16", "fwd", None, None, None,
                                                    error="RuntimeError: <boom>")]
    path = sr.write(tmp_path / "run" / "record.json", rec)
    out = tmp_path / "r.html"
    assert report.main([str(path), "-o", str(out)]) == 0
    page = parse(out)
    text = " ".join(page.section_text["peers"].split())
    assert "Against torchvision" in text and "torch.profiler (Kineto/CUPTI)" in text
    assert "roi_align box_head_1000 box_head_1000 shape fp32 fwd 0.9 0.3 3.00x 1e-06" in text
    assert "roi_align box_head_1000 box_head_1000 shape bf16 fwd none 0.2 none 0.002" in text
    assert "nms boxes_20000 boxes_20000 shape fp32 fwd 4 0.5 8.00x valid (not margin-clean" in text
    assert "error: RuntimeError: <boom>" in text  # escaped, shown as text
    titles = [t for t in page.svg_titles if ": torchvision " in t]
    assert "roi_align/box_head_1000 · fp32 · fwd: torchvision 0.9 ms, DetOps 0.3 ms" in titles
    assert "nms/boxes_20000 · fp32 · fwd: torchvision 4 ms, DetOps 0.5 ms" in titles
    assert len(titles) == 2  # entries without a torchvision time get no bar
    assert sum(1 for tag, _ in page.tags if tag == "svg") == 3


def test_report_without_peers_says_why(demo, tmp_path):
    _, cand = demo
    out = tmp_path / "r.html"
    assert report.main([str(cand), "-o", str(out)]) == 0
    assert "No peer entries in this record" in parse(out).section_text["peers"]


def _hw_record(tmp_path):
    """Three benchmarks: one measured, one whose pass failed, one where the machine could not profile."""
    rec = sr.make_record([("roi_align", "box_head_1000", "fp32", "fwd", 0.36),
                          ("roi_align", "box_head_1000", "fp32", "bwd", 1.2),
                          ("nms", "boxes_20000", "fp32", "fwd", 0.5)])
    sr.set_hardware_metrics(rec, "roi_align/box_head_1000/fp32/fwd",
                            sr.measured_hardware_metrics(read=150_000_000, written=50_176_000, duration_ns=400_000,
                                                         median_ms=0.36, pct_of_peak=10.5, l2_bytes=9e8, passes=4))
    sr.set_hardware_metrics(rec, "roi_align/box_head_1000/fp32/bwd",
                            {"status": "error", "passes": 1,
                             "reason": "the op call failed during the metrics pass: <out of memory>"})
    sr.set_hardware_metrics(rec, "nms/boxes_20000/fp32/fwd",
                            {"status": "skipped", "reason": "cuptiRangeProfilerStart failed: "
                             "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES; run as root"})
    return sr.write(tmp_path / "hw" / "record.json", rec)


def test_report_shows_measured_dram_figures_and_why_others_are_missing(tmp_path):
    path = _hw_record(tmp_path)
    out = tmp_path / "r.html"
    assert report.main([str(path), "-o", str(out)]) == 0
    page = parse(out)
    text = " ".join(page.section_text["hardware-metrics"].split())
    # read 150e6 B = 143 MiB, written 50.176e6 B = 47.9 MiB, range 400 us, 200.176e6 B / 400 us = 500 GB/s,
    # over the 0.36 ms median: 556 GB/s; 10.5% of peak; 4 passes.
    assert "roi_align box_head_1000 fp32 fwd 143 MiB 47.9 MiB 400 500 GB/s 556 GB/s 10.5% 4" in text
    # The measured table has exactly one row, the measured benchmark's; the others get no numbers.
    assert [i for i in page.row_ids if i.startswith("hw-")] == ["hw-roi_align-box_head_1000-fp32-fwd"]
    assert "error (1 benchmark): the op call failed during the metrics pass: <out of memory>" in text
    assert "roi_align/box_head_1000/fp32/bwd" in text
    assert "skipped (1 benchmark): cuptiRangeProfilerStart failed: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" in text
    assert "nms/boxes_20000/fp32/fwd" in text
    assert "<out of memory>" not in out.read_text()  # escaped


def test_report_hardware_metrics_not_requested_or_all_skipped(tmp_path):
    rec = sr.make_record([("roi_align", "tiny", "fp32", "fwd", 0.1), ("roi_align", "tiny", "fp32", "bwd", 0.3)])
    for key in ("roi_align/tiny/fp32/fwd", "roi_align/tiny/fp32/bwd"):
        sr.set_hardware_metrics(rec, key, {"status": "skipped", "reason": "not requested"})
    out = tmp_path / "r.html"
    assert report.main([str(sr.write(tmp_path / "a.json", rec)), "-o", str(out)]) == 0
    text = " ".join(parse(out).section_text["hardware-metrics"].split())
    assert "did not ask for them" in text and "--detops_metrics" in text
    assert "DRAM read" not in text and "Not measured for any benchmark" not in text

    # The synthetic default: every benchmark skipped for lack of counter permission.
    out2 = tmp_path / "r2.html"
    assert report.main([str(sr.write(tmp_path / "b.json", sr.make_record([("nms", "b", "fp32", "fwd", 0.2)]))),
                        "-o", str(out2)]) == 0
    page = parse(out2)
    text = " ".join(page.section_text["hardware-metrics"].split())
    assert "Not measured for any benchmark" in text and "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" in text
    assert "DRAM read" not in text and not any(i.startswith("hw-") for i in page.row_ids)


def test_records_with_hardware_metrics_validate_and_compare_as_without(tmp_path):
    path = _hw_record(tmp_path)
    assert compare.validate_record(compare.load_record(path))[0] == "valid"
    plain = json.loads(pathlib.Path(path).read_text())
    for e in plain["benchmarks"]:
        if "detops" in e:
            e["detops"].pop("hardware_metrics", None)
    plain_path = sr.write(tmp_path / "plain" / "record.json", plain)
    with_hw = compare.compare_records(str(plain_path), str(path), None, False)
    without = compare.compare_records(str(plain_path), str(plain_path), None, False)
    assert with_hw["exit_code"] == without["exit_code"] == 0
    assert [(r["benchmark"], r["verdict"]) for r in with_hw["benchmarks"]["rows"]] == \
        [(r["benchmark"], r["verdict"]) for r in without["benchmarks"]["rows"]]
    # A status the schema does not know is refused.
    bad = json.loads(pathlib.Path(path).read_text())
    sr.set_hardware_metrics(bad, "nms/boxes_20000/fp32/fwd", {"status": "maybe", "reason": "x"})
    status, errors = compare.validate_record(bad)
    assert status == "invalid" and any("hardware_metrics" in e for e in errors)
