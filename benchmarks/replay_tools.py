"""An export replayed by AIPerf and GuideLLM against a tiny local server: the prompt tokens each
tool sends equal the file's ``input_length``, line by line.

    .venv/bin/python benchmarks/replay_tools.py [--tools-python PY] [--requests N]

The tools run in a scratch environment outside the repository (``make peers-replay``; never a
dependency): AIPerf 0.13.0 and GuideLLM 0.8.1. The log is a gateway's, as token ids
(``ingest --format tokens``): sessions of several turns over shared system prompts, prompts
that end in a partial block. It is ingested, exported with ``prefixscope export --format
mooncake`` (plain JSON lines: GuideLLM reads no gzip), and each tool replays the file with the
flags the export prints, against ``benchmarks/replay/server.py`` on 127.0.0.1, which counts
each prompt's tokens with the byte tokenizer the tool was given (``replay/tokenizer.py``;
nothing is downloaded). Prints, per tool, the requests and prompt tokens it sent beside the
file's, and whether each prompt the server saw has a line of the file with its length (compared
as sorted lists: requests 50 ms apart may reach the server out of file order).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
PEERS = Path(os.environ.get("TMPDIR", "/tmp")) / "prefixscope-peers" / "replay"
PREFIXSCOPE = [sys.executable, "-m", "prefixscope.cli"]


def gateway_log(path: Path, n: int, seed: int = 7) -> Path:
    """``n`` requests as token ids (16-token blocks): sessions re-sending their earlier turns
    after one of two system prompts, prompts of any length, 50 ms apart."""
    rng = random.Random(seed)
    systems = [list(range(1000 * k, 1000 * k + 16 * k + 5)) for k in (1, 2)]
    sessions: dict[int, list[int]] = {}
    lines = []
    for i in range(n):
        s = rng.randrange(max(1, n // 5))
        history = sessions.setdefault(s, list(systems[s % 2]))
        history += [rng.randrange(50_000) for _ in range(rng.randrange(1, 40))]
        lines.append(json.dumps({"timestamp": i * 0.05, "tenant": f"t{s % 3}",
                                 "session": f"u{s}", "output_tokens": rng.randrange(1, 9),
                                 "token_ids": list(history)}))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {shlex.join(cmd)}\n{done.stderr[-3000:]}")
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def replay(name: str, cmd: list[str], python: str, work: Path, env: dict) -> list[int]:
    """The prompt tokens the server saw, in arrival order, while ``cmd`` replayed the file."""
    port, counts = free_port(), work / f"{name}.counts.jsonl"
    server = subprocess.Popen(
        [python, str(HERE / "replay" / "server.py"), str(port), str(counts),
         str(work / "tokens" / "tokenizer" / "tokenizer.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        run([c.replace("{url}", url) for c in cmd], env=env, cwd=work, timeout=900)
    finally:
        server.terminate()
        server.wait(10)
    return [json.loads(x)["prompt_tokens"] for x in counts.read_text().splitlines()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tools-python", default=str(PEERS / "bin" / "python"))
    p.add_argument("--requests", type=int, default=160)
    args = p.parse_args()
    python = args.tools_python
    tools = Path(python).parent
    if not (tools / "aiperf").exists() or not (tools / "guidellm").exists():
        print(f"no AIPerf and GuideLLM beside {python}: run `make peers-replay` first")
        return 2
    with tempfile.TemporaryDirectory(prefix="prefixscope-replay-") as tmp:
        work = Path(tmp)
        log = gateway_log(work / "gateway.jsonl", args.requests)
        wh, trace = work / "w.duckdb", work / "trace.jsonl"
        run([*PREFIXSCOPE, "ingest", "--format", "tokens", "--input", str(log), "--warehouse",
             str(wh), "--tenant-field", "tenant", "--session-field", "session"])  # fmt: skip
        said = run([*PREFIXSCOPE, "export", "--warehouse", str(wh), "--format", "mooncake",
                    "--out", str(trace)]).stdout  # fmt: skip
        flags = {
            line.split(": ", 1)[0].removeprefix("replay it with "): line.split(": ", 1)[1]
            for line in said.splitlines()
            if line.startswith("replay it with ")
        }
        want = [json.loads(x)["input_length"] for x in trace.read_text().splitlines()]
        run([python, str(HERE / "replay" / "tokenizer.py"), str(work / "tokens")])
        env = {**os.environ, "HF_HOME": str(work / "tokens" / "hf"), "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
        bin_ = str(tools)
        aiperf = shlex.split(flags["AIPerf"].removesuffix(" …"))
        aiperf = [f"{bin_}/aiperf", *aiperf[1:], "--model", "tiny", "--url", "{url}",
                  "--endpoint-type", "completions", "--tokenizer", "local/bytes",
                  "--artifact-dir", str(work / "aiperf"), "--ui-type", "none",
                  "--no-server-metrics"]  # fmt: skip
        guidellm = shlex.split(flags["GuideLLM"].removesuffix(" …"))
        guidellm = [f"{bin_}/guidellm", *guidellm[1:],
                    "--backend", "kind=openai_http,target={url},model=tiny,"
                    "request_format=/v1/completions",
                    "--tokenizer", f"kind=hf_auto,model={work / 'tokens' / 'tokenizer'}",
                    "--profile", "kind=replay", "--disable-console-interactive",
                    "--output", f"kind=json,path={work / 'guidellm.json'}"]  # fmt: skip
        print(f"{trace.name}: {len(want)} requests, {sum(want):,} prompt tokens; "
              f"{said.splitlines()[0].split(': ', 1)[1]}")  # fmt: skip
        print("| tool | requests sent | prompt tokens sent | every prompt a line's length |")
        print("|---|---:|---:|---|")
        failed = False
        for name, cmd in (("AIPerf 0.13.0", aiperf), ("GuideLLM 0.8.1", guidellm)):
            got = replay(name.split()[0].lower(), cmd, python, work, env)
            same = sorted(got) == sorted(want)
            failed |= not same
            print(f"| {name} | {len(got)} of {len(want)} | {sum(got):,} of {sum(want):,} | "
                  f"{'yes' if same else 'no'} |")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
