"""What operating a fleet with long tasks costs: duplicated deliveries and
work-seconds thrown away per operation, today's behaviour beside the new one.

Tasks of ``--task-s`` (20-60 s, seeded) stand in for hour-long ones. Every replica is
``priority-pubsub run`` (the local driver on one SQLite file per run, concurrency 4, queues
``high`` with ``reserve: 1`` and ``low``, the chart's defaults otherwise: ``app.timeout_s``
3600, retries from 1 s, a 60 s lease, ``shutdown.grace_s`` 30) delivering to one app in this
process that sleeps each task's seconds and records every delivery's start and end (or the
moment its request was given up: the sidecar closed it). Each run starts its replicas, fills
their low workers with tasks (3 each, no backlog: a returned task is redone at once), waits a
seeded ``--op-after-s`` into the tasks, and operates:

* ``reload``: ``reserve`` of ``high`` 1 -> 2. *Today* (``--baseline``, main before live reload,
  finish mode and the deletion cost, b4ff584, in a git worktree run with its own
  ``PYTHONPATH``) a config change is a
  restart of the pod (the chart's checksum annotation rolled it): SIGTERM, the kubelet's grace
  period, then a new process with the new file; *new*: the file rewritten in place
  (write-and-rename), applied by the running sidecar's watch. Applied after: from the write to
  the new config in force (new: ``/api/v1/state``'s ``config.loaded_ms``; today: the new
  process ready).
* ``sigterm``: the pod stopped during its tasks (a rollout, a node drain): a replacement
  replica is up first, as a rollout's new pod, then the kubelet stops the old one: today
  SIGTERM in the default ``return`` mode; new ``shutdown.mode: finish`` with the chart's
  preStop hook (``GET /drain?wait=true`` on the ops port, called beside the SIGTERM).
* ``scale_in``: two busy replicas, one removed as a ReplicaSet would pick it: today at
  random (seeded); new with ``kubernetes.deletion_cost`` on, each replica against its own
  Kubernetes API stand-in (``tests.support.kube_api``: TLS, the service account's token, the
  pod's merge patch), the replica whose stand-in recorded the lowest cost, a tie broken by
  the same seeded draw (the ReplicaSet's later rules know nothing of tasks); the victim then
  stops as in ``sigterm`` (today ``return``, new ``finish``).

The kubelet's grace period (SIGKILL after it): today the chart's ``ceil(grace_s) + 15`` (45
s); new the longest timeout (``queues[].timeout_s``: the longest task + 15 s) + 15 s. A run
ends when every task in flight at the operation has finished or started again elsewhere, and
the stopped process has exited. Counted per run: duplicated deliveries (messages delivered
more than once), work-seconds thrown away (the time spent on deliveries that were cut short
or delivered again: work redone from the start), and the seconds the stopped pod took to
go. Medians of ``--rounds`` rounds, both sides of a round on the same seed.

    python -m bench.operations --rounds 3
    python -m bench.operations --rounds 1 --ops reload --no-baseline
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bench.harness.brokers import LocalBroker
from bench.harness.output import emit, log
from bench.harness.processes import CliSidecar, git_worktree
from bench.harness.rendering import Rendering, Rows, format_md, met
from bench.harness.stats import median

if TYPE_CHECKING:
    from tests.support.kube_api import KubeApiStandIn

BASELINE = "b4ff584"
"""The last commit with no live reload, no ``finish`` mode, no deletion
cost, no per-queue timeout."""
OPERATIONS = ("reload", "sigterm", "scale_in")
SIDES = ("baseline", "new")
CONCURRENCY = 4
RESERVE, RESERVE_AFTER = 1, 2
"""``reserve`` of ``high`` before and after the reload."""
PER_REPLICA = CONCURRENCY - RESERVE
"""Low tasks each replica holds: its workers the reserve leaves to ``low``."""
MARGIN_S = 15
"""The chart's ``sidecar.terminationMarginSeconds``."""
TIMEOUT_MARGIN_S = 15
"""``queues[].timeout_s`` is the longest task + this: no honest task reaches it."""
POLL_S = 0.1


@dataclass
class Delivery:
    tag: str
    replica: str
    start: float
    end: float | None = None
    done: bool = False
    """The app finished it (else it was given up: its request closed, or still running)."""


class TaskApp:
    """The app: holds each request the seconds its task names (``data.s``), in its own event
    loop in a thread, and records every delivery per replica (``/{replica}/tasks``). A
    request the sidecar gives up on (its connection closed) cancels the task there, as an
    app that stops when its caller is gone (aiohttp's ``handler_cancellation``)."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="task-app", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the task app did not start")

    def url(self, replica: str) -> str:
        return f"http://127.0.0.1:{self.port}/{replica}/tasks"

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/{replica}/tasks", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5,
                                     handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _handle(self, request: web.Request) -> web.Response:
        data = (await request.json())["data"]
        delivery = Delivery(data["tag"], request.match_info["replica"], time.monotonic())
        with self._lock:
            self.deliveries.append(delivery)
        try:
            await asyncio.sleep(float(data["s"]))
        except asyncio.CancelledError:  # given up: the sidecar closed the request
            with self._lock:
                delivery.end = time.monotonic()
            raise
        with self._lock:
            delivery.end = time.monotonic()
            delivery.done = True
        return web.Response(status=200)

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return [Delivery(d.tag, d.replica, d.start, d.end, d.done) for d in self.deliveries]

    def running(self, replica: str | None = None) -> list[Delivery]:
        return [d for d in self.snapshot()
                if d.end is None and replica in (None, d.replica)]

    def close(self) -> None:
        async def stop() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(15)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@dataclass
class Side:
    """How one side runs its replicas: today's code in a worktree, or this checkout's."""

    name: str
    tree: Path | None
    grace_s: float
    task_max_s: float

    @property
    def new(self) -> bool:
        return self.name == "new"

    @property
    def timeout_s(self) -> float:
        return float(round(self.task_max_s + TIMEOUT_MARGIN_S))

    @property
    def termination_grace_s(self) -> float:
        """The kubelet's grace period the chart gives: today ``ceil(grace_s)`` + the margin;
        in ``finish`` mode the longest timeout + ``block_s`` (0) + the margin."""
        return (self.timeout_s if self.new else float(-(-self.grace_s // 1))) + MARGIN_S

    def env(self) -> dict[str, str]:
        return {} if self.tree is None else {"PYTHONPATH": str(self.tree)}

    def config(self, directory: Path, app: TaskApp, replica: str, *, reserve: int = RESERVE,
               kube: KubeApiStandIn | None = None) -> dict[str, Any]:
        """The chart's defaults (values.yaml at b4ff584) with what the bench pins; the new
        side adds what the fleet docs ask to set for long tasks."""
        queues: list[dict[str, Any]] = [{"name": "high", "reserve": reserve}, {"name": "low"}]
        shutdown: dict[str, Any] = {"grace_s": self.grace_s}
        config: dict[str, Any] = {
            "driver": {"type": "local", "path": str(directory / "queues.db")},
            "queues": queues,
            "scheduling": "strict",
            "concurrency": CONCURRENCY,
            "app": {"url": app.url(replica), "timeout_s": 3600},
            "retry": {"max_attempts": 10, "initial_delay_s": 1, "max_delay_s": 600},
            "lease": {"duration_s": 60},
            "shutdown": shutdown,
            "server": {"host": "127.0.0.1", "port": 0},
            "journal": {"path": str(directory / f"journal-{replica}"), "rotate_mb": 64},
            "log": {"level": "info", "format": "json"},
        }
        if self.new:
            for queue in queues:
                queue["timeout_s"] = self.timeout_s
            shutdown["mode"] = "finish"
            if kube is not None:
                config["kubernetes"] = {"deletion_cost": True,
                                        "service_account_dir": str(kube.service_account_dir)}
        return config

    def start(self, directory: Path, config: dict[str, Any], name: str,
              kube: KubeApiStandIn | None = None) -> CliSidecar:
        env = {**self.env(), **(kube.env if kube is not None else {})}
        sidecar = CliSidecar(directory, config, name=name, env=env, cwd=self.tree)
        sidecar.wait_ready(60)
        return sidecar


@dataclass
class Stop:
    """The kubelet stopping a pod: the app's preStop hook (``finish``: ``GET
    /drain?wait=true`` on the ops port) and SIGTERM to the sidecar at once, SIGKILL after the
    grace period. Runs in a thread; times are ``time.monotonic()``."""

    sidecar: CliSidecar
    grace_period_s: float
    hook: bool
    sent: float = 0.0
    exited: float | None = None
    killed: bool = False
    hook_answered: float | None = None
    hook_status: int | None = None
    _threads: list[threading.Thread] = field(default_factory=list)

    def begin(self) -> Stop:
        self.sent = time.monotonic()
        if self.hook:
            self._threads.append(threading.Thread(target=self._hook, daemon=True))
        self._threads.append(threading.Thread(target=self._terminate, daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def _hook(self) -> None:
        url = f"http://127.0.0.1:{self.sidecar.port}/drain?wait=true"
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=self.grace_period_s) as answer:
                self.hook_status = int(answer.status)
            self.hook_answered = time.monotonic()

    def _terminate(self) -> None:
        process = self.sidecar.process
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(self.grace_period_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            self.killed = True
        self.exited = time.monotonic()

    def join(self) -> None:
        for thread in self._threads:
            thread.join(self.grace_period_s + 5)

    def figures(self) -> dict[str, Any]:
        return {"stop_s": None if self.exited is None else round(self.exited - self.sent, 1),
                "killed": self.killed,
                "hook_s": (None if self.hook_answered is None
                           else round(self.hook_answered - self.sent, 1)),
                "hook_status": self.hook_status}


def task_body(tag: str, seconds: float) -> bytes:
    return json.dumps({"tag": tag, "s": seconds}).encode()


def publish(directory: Path, tasks: list[tuple[str, float]]) -> None:
    bodies = [task_body(tag, seconds) for tag, seconds in tasks]
    asyncio.run(LocalBroker(directory).preload("low", len(bodies), lambda i: bodies[i]))


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(POLL_S)


def state(sidecar: CliSidecar) -> dict[str, Any]:
    status, body = sidecar.get("/api/v1/state")
    if status != 200:
        raise RuntimeError(f"/api/v1/state answered {status}")
    value: dict[str, Any] = json.loads(body)
    return value


def reloaded(log_path: Path) -> list[str] | None:
    """What the sidecar's "config reloaded" line says it changed (None: no such line)."""
    for line in log_path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("event") == "config reloaded":
                return list(event.get("changed", []))
    return None


def settled(app: TaskApp, tags: set[str], at: float) -> bool:
    """Every task in flight at the operation finished, or started again after it."""
    by_tag: dict[str, list[Delivery]] = {}
    for d in app.snapshot():
        by_tag.setdefault(d.tag, []).append(d)
    return all(any(d.done for d in by_tag[tag]) or any(d.start > at for d in by_tag[tag])
               for tag in tags)


def accounting(deliveries: list[Delivery], now: float) -> dict[str, Any]:
    """Duplicates: messages delivered more than once. Thrown away: every delivery given up
    before its end, or followed by another delivery of its message (its work is redone from
    the start), for the time it ran."""
    by_tag: dict[str, list[Delivery]] = {}
    for d in sorted(deliveries, key=lambda d: d.start):
        by_tag.setdefault(d.tag, []).append(d)
    lost = 0.0
    cut = 0
    not_redone = 0
    for runs in by_tag.values():
        for index, d in enumerate(runs):
            again = index < len(runs) - 1
            given_up = d.end is not None and not d.done
            if given_up or again:
                lost += (d.end if d.end is not None else now) - d.start
            cut += given_up
            not_redone += given_up and not again
    return {"deliveries": len(deliveries), "messages": len(by_tag),
            "duplicates": sum(len(runs) > 1 for runs in by_tag.values()),
            "work_s_lost": round(lost, 1), "cut_short": cut, "cut_not_redone": not_redone}


@dataclass
class Run:
    """One operation on one side: its own directory, app and replicas."""

    side: Side
    directory: Path
    rng: random.Random
    task_s: tuple[float, float]
    op_after_s: tuple[float, float]
    app: TaskApp = field(default_factory=TaskApp)
    sidecars: list[CliSidecar] = field(default_factory=list)
    tasks: list[tuple[str, float]] = field(default_factory=list)

    def draw_tasks(self, count: int) -> list[tuple[str, float]]:
        drawn = [(f"t{len(self.tasks) + n}", round(self.rng.uniform(*self.task_s), 1))
                 for n in range(count)]
        self.tasks += drawn
        return drawn

    def start(self, name: str, *, reserve: int = RESERVE,
              kube: KubeApiStandIn | None = None) -> CliSidecar:
        config = self.side.config(self.directory, self.app, name, reserve=reserve, kube=kube)
        sidecar = self.side.start(self.directory, config, name, kube)
        self.sidecars.append(sidecar)
        return sidecar

    def fill(self, replicas: int) -> None:
        """Tasks for every low worker of ``replicas`` replicas, all of them running."""
        publish(self.directory, self.draw_tasks(PER_REPLICA * replicas))
        wait_for(lambda: len(self.app.running()) == PER_REPLICA * replicas, 30,
                 "every low worker busy")

    def wait_into_tasks(self) -> float:
        """The seeded wait into the tasks; the moment of the operation (monotonic)."""
        after = round(self.rng.uniform(*self.op_after_s), 1)
        time.sleep(after)
        return after

    def settle(self, in_flight: set[str], at: float, stop: Stop | None,
               also: Callable[[], bool] = lambda: True) -> dict[str, Any]:
        """Wait until the operation's outcome is known; its figures."""
        limit = self.side.termination_grace_s + 60
        wait_for(lambda: settled(self.app, in_flight, at)
                 and (stop is None or stop.exited is not None) and also(),
                 limit, "the tasks in flight at the operation to finish or start again")
        if stop is not None:
            stop.join()
        now = time.monotonic()
        return {**accounting(self.app.snapshot(), now), "in_flight_at_op": len(in_flight),
                "settled_after_s": round(now - at, 1),
                **(stop.figures() if stop is not None else {})}

    def close(self) -> None:
        for sidecar in self.sidecars:
            if sidecar.process.poll() is None:
                sidecar.process.kill()
                sidecar.process.wait()
            sidecar.stop()  # closes its log
        self.app.close()


def reload_op(run: Run) -> dict[str, Any]:
    a = run.start("a")
    run.fill(1)
    after = run.wait_into_tasks()
    in_flight = {d.tag for d in run.app.running()}
    new_config = run.side.config(run.directory, run.app, "a", reserve=RESERVE_AFTER)
    at = time.monotonic()
    if run.side.new:
        import yaml

        before = state(a)["config"]["hash"]
        staged = a.config_path.with_suffix(".new")
        staged.write_text(yaml.safe_dump({**new_config, "server": a.config["server"]},
                                         sort_keys=False))
        os.replace(staged, a.config_path)  # an editor's write-and-rename
        written_ms = time.time() * 1000
        wait_for(lambda: state(a)["config"]["hash"] != before, 30, "the reload")
        config = state(a)["config"]
        applied_s = round((config["loaded_ms"] - written_ms) / 1000, 2)
        result = {**run.settle(in_flight, at, None), "changed": reloaded(run.directory / "a.log")}
    else:  # a restart of the pod: the kubelet stops it, a new process reads the new file
        stop = Stop(a, run.side.termination_grace_s, hook=False).begin()
        stop.join()
        restarted = run.side.start(run.directory, new_config, "a-restarted")
        run.sidecars.append(restarted)
        applied_s = round(time.monotonic() - at, 2)
        result = run.settle(in_flight, at, stop)
    return {**result, "op_after_s": after, "applied_s": applied_s}


def sigterm_op(run: Run) -> dict[str, Any]:
    a = run.start("a")
    run.fill(1)
    run.start("b")  # the replacement, up before the old pod is stopped (a rollout's surge)
    after = run.wait_into_tasks()
    in_flight = {d.tag for d in run.app.running("a")}
    at = time.monotonic()
    stop = Stop(a, run.side.termination_grace_s, hook=run.side.new).begin()
    return {**run.settle(in_flight, at, stop), "op_after_s": after}


def scale_in_op(run: Run, stack: contextlib.ExitStack) -> dict[str, Any]:
    kubes: dict[str, KubeApiStandIn | None] = {"a": None, "b": None}
    if run.side.new:
        from tests.support.kube_api import KubeApiStandIn

        for name in kubes:
            kubes[name] = stack.enter_context(
                KubeApiStandIn(run.directory / f"serviceaccount-{name}", name=f"work-{name}"))
    replicas = {name: run.start(name, kube=kube) for name, kube in kubes.items()}
    run.fill(2)
    after = run.wait_into_tasks()
    tie_break = run.rng.randrange(2)  # drawn on both sides: today's pick, new's tie-break
    costs = {name: (None if kube is None else kube.cost()) for name, kube in kubes.items()}
    names = sorted(replicas)
    if run.side.new:
        lowest = min(int(cost or 0) for cost in costs.values())
        names = [name for name in names if int(costs[name] or 0) == lowest]
    victim = names[tie_break % len(names)]
    busy = {name: len(run.app.running(name)) for name in replicas}
    in_flight = {d.tag for d in run.app.running(victim)}
    at = time.monotonic()
    stop = Stop(replicas[victim], run.side.termination_grace_s, hook=run.side.new).begin()
    result = run.settle(in_flight, at, stop)
    return {**result, "op_after_s": after, "victim": victim, "costs": costs,
            "busy_at_pick": busy}


def one_run(op: str, side: Side, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-op-{op}-")))
        run = Run(side, directory, random.Random(seed), args.task_s, args.op_after_s)
        stack.callback(run.close)
        started = time.monotonic()
        if op == "reload":
            result = reload_op(run)
        elif op == "sigterm":
            result = sigterm_op(run)
        else:
            result = scale_in_op(run, stack)
        return {"op": op, "side": side.name, "seed": seed, **result,
                "tasks_s": [seconds for _, seconds in run.tasks],
                "run_s": round(time.monotonic() - started, 1)}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure: the median and each round's value."""
    out: dict[str, Any] = {"rounds": len(runs)}
    for key in ("duplicates", "work_s_lost", "applied_s", "stop_s", "hook_s", "cut_short",
                "in_flight_at_op", "settled_after_s"):
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            out[key] = round(float(median(values) or 0), 2)
            out[f"{key}_rounds"] = values
    out["killed"] = sum(bool(r.get("killed")) for r in runs)
    out["cut_not_redone"] = sum(r["cut_not_redone"] for r in runs)
    return out


def pair(text: str) -> tuple[float, float]:
    low, high = (float(v) for v in text.split(","))
    return low, high


@contextlib.contextmanager
def baseline_tree(commit: str | None) -> Iterator[Path | None]:
    with contextlib.ExitStack() as stack:
        if commit is None:
            yield None
            return
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-op-base-")))
        yield git_worktree(commit, work / "baseline", stack)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", default=",".join(OPERATIONS),
                        help=f"which operations, comma-separated ({', '.join(OPERATIONS)})")
    parser.add_argument("--task-s", type=pair, default=(20.0, 60.0),
                        help="task lengths MIN,MAX (uniform, seeded)")
    parser.add_argument("--op-after-s", type=pair, default=(5.0, 15.0),
                        help="MIN,MAX seconds into the tasks when the operation comes")
    parser.add_argument("--grace-s", type=float, default=30.0,
                        help="shutdown.grace_s (the chart's 30; today's kubelet grace is "
                             "ceil(it) + 15)")
    parser.add_argument("--baseline", default=BASELINE,
                        help="the commit whose code is today's behaviour (a git worktree)")
    parser.add_argument("--no-baseline", action="store_true", help="the new side only")
    parser.add_argument("--seed", type=int, default=40)
    args = parser.parse_args()
    ops = [op for op in args.ops.split(",") if op]
    unknown = set(ops) - set(OPERATIONS)
    if unknown:
        parser.error(f"unknown operations: {', '.join(sorted(unknown))}")
    runs: list[dict[str, Any]] = []
    with baseline_tree(None if args.no_baseline else args.baseline) as tree:
        sides = [Side("new", None, args.grace_s, args.task_s[1])]
        if tree is not None:
            sides.insert(0, Side("baseline", tree, args.grace_s, args.task_s[1]))
        for round_ in range(args.rounds):
            for index, op in enumerate(ops):
                seed = args.seed * 1000 + round_ * 10 + index
                ordered = sides if round_ % 2 == 0 else sides[::-1]  # drift falls on both
                for side in ordered:
                    log(f"round {round_ + 1}/{args.rounds}: {op}, {side.name} (seed {seed}) ...")
                    result = {"round": round_ + 1, **one_run(op, side, seed, args)}
                    log(f"  duplicates {result['duplicates']}, work-s lost "
                        f"{result['work_s_lost']}, stop {result.get('stop_s', '-')} s, "
                        f"applied {result.get('applied_s', '-')} s, run {result['run_s']} s")
                    runs.append(result)
    operations = {op: {side.name: summary([r for r in runs
                                           if r["op"] == op and r["side"] == side.name])
                       for side in sides} for op in ops}
    rows = [[op, side, s.get("duplicates"), s.get("work_s_lost"), s.get("stop_s"),
             s.get("applied_s"), s["killed"]]
            for op, by_side in operations.items() for side, s in by_side.items()]
    emit("operations", {
        "rounds": args.rounds, "task_s": list(args.task_s), "op_after_s": list(args.op_after_s),
        "concurrency": CONCURRENCY, "low_tasks_per_replica": PER_REPLICA,
        "grace_s": args.grace_s, "baseline": None if args.no_baseline else args.baseline,
        "termination_grace_s": {side.name: side.termination_grace_s for side in sides},
        "timeout_s": sides[-1].timeout_s, "operations": operations, "runs": runs,
    }, ["operation", "side", "duplicates", "work-s lost", "stop s", "applied s", "killed"],
        rows)


OPERATION_NAMES = {"reload": "reload of `reserve`", "sigterm": "SIGTERM during long tasks",
                   "scale_in": "scale-in of one of two busy replicas"}


SIDE_NAMES = {("reload", "baseline"): "today: a restart (SIGTERM, `return`, a new process)",
              ("reload", "new"): "new: live reload (the file watched)",
              ("sigterm", "baseline"): "today: `return`",
              ("sigterm", "new"): "new: `finish` + preStop `/drain?wait=true`",
              ("scale_in", "baseline"): "today: a random victim, `return`",
              ("scale_in", "new"): "new: the lowest deletion cost, `finish`"}


def _rounds(summary: dict[str, Any], key: str) -> str:
    """``median (a / b / c)``, or - where the side has no such figure."""
    if key not in summary:
        return "-"
    return f"{summary[key]:g} ({' / '.join(f'{v:g}' for v in summary[key + '_rounds'])})"


def section(result: dict[str, Any]) -> list[str]:
    """Per operation and side: the medians and each round's figures."""
    rows = [[OPERATION_NAMES.get(op, op), SIDE_NAMES.get((op, side), side),
             _rounds(s, "duplicates"), _rounds(s, "work_s_lost"), _rounds(s, "stop_s"),
             _rounds(s, "applied_s"), _rounds(s, "hook_s"), s.get("killed")]
            for op, sides in result.get("operations", {}).items() for side, s in sides.items()]
    low, high = result["task_s"]
    first, last = result["op_after_s"]
    grace = result.get("termination_grace_s", {})
    return [f"tasks of {low:g}-{high:g} s (seeded) standing in for hour-long ones, "
            f"{result['low_tasks_per_replica']} per replica, the operation {first:g}-{last:g} "
            "s into them; today = "
            f"`{result.get('baseline')}` (a git worktree): `shutdown.grace_s` "
            f"{result['grace_s']:g}, the kubelet's grace {grace.get('baseline', '-')} s; new: "
            f"`queues[].timeout_s` {result['timeout_s']:g}, grace {grace.get('new', '-')} s. "
            f"Medians of {result['rounds']} rounds (each round's figure in brackets; both "
            "sides of a round on one seed). Work-seconds lost: time spent on deliveries cut "
            "short or delivered again; pod gone: SIGTERM to exit; applied: the file written "
            "to the new config in force (today: the restarted process ready); preStop hook: "
            "`GET /drain?wait=true` answered.", "",
            format_md(["operation", "side", "duplicated deliveries", "work-s lost",
                       "pod gone after s", "applied after s", "preStop hook s",
                       "SIGKILLed"], rows)]


def targets(result: dict[str, Any]) -> Rows:
    """A reload, and a scale-in with ``finish``, throw nothing away; a reload is
    applied within 5 s of the file change."""
    rows: Rows = []
    operations = result.get("operations", {})
    for op, what in (("reload", "live reload of `reserve`"),
                     ("scale_in", "scale-in of one of two busy replicas, `finish`")):
        new, today = operations.get(op, {}).get("new"), operations.get(op, {}).get("baseline")
        if new is None:
            continue
        for key, unit in (("duplicates", "duplicated deliveries"),
                          ("work_s_lost", "work-seconds lost")):
            before = f"; today {today[key]:g}" if today else ""
            rows.append([f"{what}: 0 {unit} (median of {new['rounds']}; rounds "
                         f"{' / '.join(f'{v:g}' for v in new[key + '_rounds'])}{before})",
                         new[key], met(0, new[key])])
    reload = operations.get("reload", {}).get("new")
    if reload is not None and "applied_s" in reload:
        rows.append([f"live reload applied within 5 s of the file change (median of "
                     f"{reload['rounds']}; max {max(reload['applied_s_rounds']):g})",
                     reload["applied_s"], met(5.0, reload["applied_s"])])
    return rows


def _without_runs(body: dict[str, Any]) -> dict[str, Any]:
    """The table shows each round; every run stays in results.json."""
    return {k: v for k, v in body.items() if k != "runs"}


RENDERING = Rendering(targets=targets, section=section, shown=_without_runs)


if __name__ == "__main__":
    main()
