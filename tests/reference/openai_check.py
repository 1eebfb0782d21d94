#!/usr/bin/env python3
"""A real OpenAI client against `unillm serve` (the `openai` package from PyPI, pinned in
tests/reference/constraints.txt): models list, completion, chat completion, streaming, n > 1,
logprobs, structured output (a pydantic model through the client's `parse`, validated by
pydantic), a tools request with an earlier call and its result, forced calls (tool_choice
required and a named function), and a LoRA adapter served by
name whose greedy output equals `unillm generate --adapter`. Trains that adapter first (a 4-step
LoRA SFT of the bundled stories260K). The server binds to a free loopback port and is always
stopped (SIGTERM, then SIGKILL) before this exits.

  openai_check.py --unillm build/unillm --work DIR
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Literal

import openai
import pydantic

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "assets" / "stories260K"
PROMPT_IDS = [1, 403, 407, 261, 378, 260, 266, 292, 284, 343]


class Pet(pydantic.BaseModel):
    kind: Literal["cat", "dog", "fish"]
    name: str = pydantic.Field(max_length=16)


class Household(pydantic.BaseModel):
    owner: str = pydantic.Field(max_length=24)
    rooms: int = pydantic.Field(ge=1, le=12)
    pets: List[Pet] = pydantic.Field(max_length=2)


def fail(msg):
    print(f"openai_check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def train_adapter(unillm, work):
    out = work / "adapter"
    cfg = work / "lora.yaml"
    cfg.write_text(
        f"model_name_or_path: {MODEL}\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        f"lora_rank: 4\ndataset: alpaca_en_demo\ndataset_dir: {ROOT / 'data'}\ntemplate: alpaca\n"
        f"cutoff_len: 128\nmax_samples: 32\noutput_dir: {out}\noverwrite_output_dir: true\n"
        "per_device_train_batch_size: 4\nlearning_rate: 5.0e-2\nmax_steps: 4\nlogging_steps: 1\n"
        "save_strategy: 'no'\nseed: 3\n")
    run([unillm, "train", str(cfg), "--quiet", "--threads", "1"])
    return out


def start_server(unillm, adapter, log):
    cmd = [unillm, "serve", "--model", str(MODEL), "--port", "0", "--threads", "1",
           "--template", "alpaca", "--served-model-name", "tiny", "--adapter", f"tuned={adapter}",
           "--api-key", "sk-test"]
    proc = subprocess.Popen(cmd, stderr=open(log, "w"), stdout=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", Path(log).read_text())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            fail(f"the server exited {proc.returncode}: {Path(log).read_text()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    fail("the server did not start within 60 s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unillm", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    adapter = train_adapter(a.unillm, work)
    proc, port = start_server(a.unillm, adapter, work / "serve.log")
    try:
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", max_retries=0,
                          timeout=120)
        ids = sorted(m.id for m in c.models.list().data)
        check(ids == ["tiny", "tuned"], f"models: {ids}")

        def greedy(model, n=16):
            r = c.completions.create(model=model, prompt=PROMPT_IDS, max_tokens=n, temperature=0,
                                     extra_body={"ignore_eos": True})
            check(r.choices[0].finish_reason == "length", f"finish_reason {r.choices[0].finish_reason}")
            check(r.usage.completion_tokens == n, f"usage {r.usage}")
            return r.choices[0].text

        for model, extra in (("tiny", []), ("tuned", ["--adapter", str(adapter)])):
            want = run([a.unillm, "generate", "--model", str(MODEL), *extra, "--prompt-ids",
                        ",".join(map(str, PROMPT_IDS)), "--max-new-tokens", "16", "--temperature", "0",
                        "--ignore-eos", "--quiet", "--threads", "1"])
            got = greedy(model)
            check(got + "\n" == want, f"{model}: server {got!r} != generate {want!r}")
        check(greedy("tiny") != greedy("tuned"), "the adapter changed nothing")

        chat = c.chat.completions.create(model="tiny", max_tokens=12, temperature=0,
                                         messages=[{"role": "user", "content": "Tell me a story."}])
        check(chat.choices[0].message.role == "assistant", "chat role")
        text = chat.choices[0].message.content
        streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="tiny", max_tokens=12, temperature=0, stream=True,
            messages=[{"role": "user", "content": "Tell me a story."}]) if ch.choices)
        check(streamed == text, f"stream {streamed!r} != whole {text!r}")

        many = c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=8, n=3,
                                    seed=11, temperature=1.0, logprobs=2)
        check(len(many.choices) == 3, "n=3")
        lp = many.choices[0].logprobs
        check(len(lp.token_logprobs) == len(lp.tokens) and all(v <= 0 for v in lp.token_logprobs),
              f"logprobs {lp}")
        again = c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=8, n=3,
                                     seed=11, temperature=1.0, logprobs=2)
        check([x.text for x in many.choices] == [x.text for x in again.choices], "seeded n=3 repeatable")

        clp = c.chat.completions.create(model="tiny", max_tokens=4, temperature=0, logprobs=True,
                                        top_logprobs=3, messages=[{"role": "user", "content": "Hi"}])
        content = clp.choices[0].logprobs.content
        check(len(content) >= 1 and len(content[0].top_logprobs) == 3, f"chat logprobs {content}")

        # Structured output the way OpenAI users write it: a pydantic model, turned into a strict
        # JSON schema by the client ($defs/$ref, enum, additionalProperties false, titles) and the
        # answer validated by pydantic: an independent check of the grammar.
        parse = getattr(c.chat.completions, "parse", None) or c.beta.chat.completions.parse
        for seed in range(3):
            done = parse(model="tiny", messages=[{"role": "user", "content": "Who lives here?"}],
                         response_format=Household, max_tokens=400, temperature=1.0, seed=seed)
            check(done.choices[0].finish_reason == "stop", f"structured finish {done.choices[0].finish_reason}")
            got = done.choices[0].message.parsed
            check(isinstance(got, Household), f"structured output not parsed: {done.choices[0].message.content!r}")
        obj = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}],
                                        response_format={"type": "json_object"}, max_tokens=300,
                                        temperature=0.8, seed=5)
        if obj.choices[0].finish_reason == "stop":
            check(isinstance(json.loads(obj.choices[0].message.content), dict), "json_object")
        try:
            c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                      response_format={"type": "json_schema", "json_schema": {
                                          "name": "x", "schema": {"type": "string", "pattern": "a+"}}})
            fail("an unsupported schema keyword was accepted")
        except openai.BadRequestError as e:
            check("pattern" in str(e), f"the 400 does not name the keyword: {e}")

        # Tools as the client sends them: a tool list, an earlier call and its result. The story
        # model answers in text (tests/cli/serve_test.cpp checks replies that are calls).
        weather = {"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
        history = [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": None, "tool_calls": [{
                       "id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
        tr = c.chat.completions.create(model="tiny", messages=history, tools=[weather], tool_choice="auto",
                                       max_tokens=6, temperature=0)
        check(tr.choices[0].finish_reason in ("stop", "length") and isinstance(tr.choices[0].message.content, str)
              and not tr.choices[0].message.tool_calls, f"tools reply {tr.choices[0]}")
        # Forced calls: "required" and a named function constrain the reply to a call whose
        # arguments follow the tool's schema.
        pick = {"type": "function", "function": {"name": "pick", "parameters": {
            "type": "object", "properties": {"color": {"enum": ["red", "blue"]}}, "required": ["color"]}}}
        for choice in ("required", {"type": "function", "function": {"name": "pick"}}):
            fr = c.chat.completions.create(model="tiny", messages=history, tools=[pick], tool_choice=choice,
                                           max_tokens=60, temperature=0)
            calls = fr.choices[0].message.tool_calls
            check(fr.choices[0].finish_reason == "tool_calls" and calls and calls[0].function.name == "pick"
                  and json.loads(calls[0].function.arguments).get("color") in ("red", "blue"),
                  f"forced call {fr.choices[0]}")
        try:
            c.chat.completions.create(model="tiny", messages=history, tools=[weather], max_tokens=2,
                                      tool_choice={"type": "function", "function": {"name": "nope"}})
            fail("a tool_choice naming an unknown function was accepted")
        except openai.BadRequestError as e:
            check("tool_choice" in str(e), f"the 400 does not name tool_choice: {e}")

        try:
            c.completions.create(model="nope", prompt="x", max_tokens=2)
            fail("an unknown model was accepted")
        except openai.NotFoundError:
            pass
        try:
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong",
                          max_retries=0).models.list()
            fail("a wrong API key was accepted")
        except openai.AuthenticationError:
            pass
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail("the server did not stop within 30 s of SIGTERM")
    check(rc == 0, f"the server exited {rc} on SIGTERM")
    print("openai_check: ok (models, completions = generate for base and adapter, chat, stream, "
          "n=3 seeded, logprobs, structured output, tools, forced calls, 404, 401, SIGTERM)")


if __name__ == "__main__":
    main()
