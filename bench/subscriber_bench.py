"""Human write → ``--on-wake`` command started, through board, hub and subscriber (SPEC §9).

Real processes as a user runs them: ``taskd serve`` on a free port, ``taskctl loop subscribe``
(which starts the hub on demand), a resident pool naming this process. Each trial posts one task
as a human and waits for the command to record its start time (``date +%s%N``); the clock is the
same wall clock on both sides. The debounce stays at its 300 ms default, so that is the floor;
the per-minute turn limit is lowered to 0, or 100 trials would take 100 minutes.

    .venv/bin/python -m bench subscriber
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.support import BIN, Service, read_json, start_board, wait_for

COMMAND = ".venv/bin/python -m bench subscriber"
TRIALS = 100
WARMUP = 3
DEBOUNCE = 0.3
ON_WAKE = "printf '%s %s\\n' \"$(date +%s%N)\" \"$TASKLOOM_WAKE_REVISION\" >> \"$WAKES_FILE\""
TIMEOUT = 20.0


async def trials(url: str, token: str, wakes: Path, state: Path, count: int) -> list[float]:
    headers = {"Authorization": f"Bearer {token}", "X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "bench"}
    latencies: list[float] = []
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{url}/api/v1/projects", json={"id": "bench", "name": "Bench"}) as reply:
            assert reply.status == 201, await reply.text()
        for n in range(count):
            seen = len(wakes.read_text().splitlines()) if wakes.exists() else 0
            started = time.time_ns()
            async with http.post(f"{url}/api/v1/tasks", json={"project": "bench", "title": f"trial {n}"}) as reply:
                assert reply.status == 201, await reply.text()
            deadline = time.monotonic() + TIMEOUT
            while True:
                lines = wakes.read_text().splitlines() if wakes.exists() else []
                if len(lines) > seen:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"trial {n}: no turn within {TIMEOUT} s")
                await asyncio.sleep(0.001)
            latencies.append((int(lines[seen].split()[0]) - started) / 1e9)
            # The next write waits until this turn has ended, so each trial is one turn on its own.
            while (read_json(state) or {}).get("turn_running"):
                await asyncio.sleep(0.001)
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="taskloom-bench-") as root_name:
        root = Path(root_name)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKLOOM_", "XDG_"))}
        env.update(TASKLOOM_RUNTIME_DIR=str(root / "run"), TASKLOOM_DATA_DIR=str(root / "data"),
                   TASKLOOM_NO_AUTOSTART="1", TASKLOOM_HUB_IDLE_EXIT="10", WAKES_FILE=str(root / "wakes"))
        state_dir = root / "loop"
        state_dir.mkdir()
        (state_dir / "sessions.state.json").write_text(json.dumps({"version": 1, "sessions": [{"pid": os.getpid()}]}))
        board = start_board(root, env=env, keep_stdout=True)
        url, token = board.url, board.token
        logs = open(root / "processes.log", "ab")
        subscriber: subprocess.Popen[bytes] | None = None
        hub_pid: int | None = None
        try:
            subscriber = subprocess.Popen(
                [str(BIN / "taskctl"), "loop", "subscribe", "--url", url, "--agent", "bench-worker",
                 "--on-wake", ON_WAKE, "--state-dir", str(state_dir), "--debounce", str(DEBOUNCE),
                 "--min-interval", "0"],
                env=env, stdin=subprocess.DEVNULL, stdout=logs, stderr=logs,
            )
            state = state_dir / "subscribe.state.json"
            wait_for("the subscriber to stream", lambda: (read_json(state) or {}).get("state") == "streaming",
                     timeout=TIMEOUT)
            hubs = list((root / "run").glob("hub-*.json"))
            hub_pid = (read_json(hubs[0]) or {}).get("pid") if hubs else None
            latencies = asyncio.run(trials(url, token, root / "wakes", state, WARMUP + TRIALS))[WARMUP:]
        finally:
            if subscriber is not None:
                Service(subscriber).stop()
            board.stop()
            if hub_pid:
                try:
                    os.kill(hub_pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            logs.close()

    ms = [value * 1000 for value in latencies]
    print(f"human write → --on-wake command started ({TRIALS} trials after {WARMUP} warm-up; "
          f"real taskd + hub + subscriber processes)")
    print()
    print("| metric | value |")
    print("|---|---|")
    print(f"| debounce | {DEBOUNCE * 1000:.0f} ms (default) |")
    print("| per-minute turn limit | lowered to 0 for the bench (default 60 s) |")
    print(f"| p50 | {percentile(ms, 0.50):.0f} ms |")
    print(f"| p99 | {percentile(ms, 0.99):.0f} ms |")
    print(f"| min / mean / max | {min(ms):.0f} / {statistics.fmean(ms):.0f} / {max(ms):.0f} ms |")
    print(f"| p50 above the debounce | {percentile(ms, 0.50) - DEBOUNCE * 1000:.0f} ms |")
    print()
    print(f"command: {COMMAND}")


if __name__ == "__main__":
    main()
