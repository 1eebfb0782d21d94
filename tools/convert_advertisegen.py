#!/usr/bin/env python3
"""AdvertiseGen ({"content", "summary"} JSON lines) -> PaddleNLP's {"src", "tgt"} SFT layout.

  python3 tools/convert_advertisegen.py ../shared/data/advertisegen/dev.json data/advertisegen

Writes OUT/train.json and OUT/dev.json (JSON lines, PaddleNLP llm/ names): the last --dev records
of the input become dev.json, the rest train.json, in file order. content -> src, summary -> tgt.
"""
import argparse
import json
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("out")
    ap.add_argument("--dev", type=int, default=100, help="records kept for dev.json")
    a = ap.parse_args()
    rows = []
    with open(a.input, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            r = json.loads(line)
            if not isinstance(r.get("content"), str) or not isinstance(r.get("summary"), str):
                raise SystemExit(f"{a.input} line {n}: expected string content and summary")
            rows.append({"src": r["content"], "tgt": r["summary"]})
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.json", rows[: -a.dev]), ("dev.json", rows[-a.dev:])):
        with open(out / name, "w", encoding="utf-8") as f:
            for r in part:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"{out / name}: {len(part)} records")


if __name__ == "__main__":
    main()
