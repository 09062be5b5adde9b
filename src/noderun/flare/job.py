"""FedAvg over sites whose clients launch noderun jobs: FLARE 2.9's ``FedAvgRecipe``, no wrappers.

    job = FedAvgJob("digits", model=Net(), script="train.py", num_rounds=3, sites=[
        Site("site-1", nnodes=2, nproc_per_node=2, launcher="slurm", args="--site 1"),
        Site("site-2", args="--site 2"),
    ])
    print(job.table())
    job.export("jobs")                 # FLARE job folder
    job.simulate("/tmp/ws")            # FLARE's simulator (SimEnv)
    job.poc()                          # FLARE's POC mode: server + clients as real processes

Every site's command is ``python -m noderun.flare.site_launch …`` (see ``Site.command``) with
``launch_external_process=True`` and one trainer process group per site for all rounds.
``python`` is the interpreter the sites run (default: this one; for a job folder exported to
other machines, the path of their environment's python). ``files`` are modules the scripts
import, shipped beside them in ``custom/``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from noderun import rundir
from noderun.errors import NoderunError, UsageError
from noderun.flare.site_launch import gpu_count
from noderun.flare.sites import Site, capacity_problem, site_table

INSTALL_HINT = (
    "pip install 'noderun[flare]' (nvflare>=2.9,<2.10; never nvflare[pt]: it replaces torch)"
)
# Seconds a simulation may go on after a site failed before the watchdog ends it
# (NODERUN_FLARE_GRACE_SEC overrides it).
SIMULATION_GRACE = 30.0
GRACE_ENV = "NODERUN_FLARE_GRACE_SEC"
# Seconds FLARE waits for a site's ranks to leave after the last round before SIGTERM.
DEFAULT_SHUTDOWN_TIMEOUT = 60.0


def require_nvflare() -> str:
    """nvflare's version when 2.9.x is importable, else a UsageError with the install command."""
    try:
        import nvflare  # noqa: F401

        version = metadata.version("nvflare")
    except (ImportError, metadata.PackageNotFoundError):
        raise UsageError("NVIDIA FLARE is not installed", INSTALL_HINT) from None
    major_minor = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if major_minor != (2, 9):
        raise UsageError(f"nvflare {version} is installed; noderun needs 2.9.x", INSTALL_HINT)
    return version


class FedAvgJob:
    """A FedAvg job whose sites run their training as noderun jobs (see module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        model: Any,
        script: str | os.PathLike[str],
        sites: Sequence[Site],
        num_rounds: int = 3,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        files: Sequence[str | os.PathLike[str]] = (),
        python: str = sys.executable,
        recipe_options: Mapping[str, Any] | None = None,
    ):
        require_nvflare()
        if not sites:
            raise UsageError("a FedAvg job needs at least one site", "pass sites=[Site('site-1')]")
        names = [s.name for s in sites]
        if len(set(names)) != len(names):
            raise UsageError(f"site names repeat: {', '.join(names)}", "give every site its own")
        if num_rounds < 1:
            raise UsageError(f"num_rounds={num_rounds}", "run at least one round")
        self.name = name
        self.script = str(script)
        self.sites = tuple(sites)
        self.scripts = {s.name: self._existing(s, s.script or self.script) for s in sites}
        missing = [str(f) for f in files if not Path(f).is_file()]
        if missing:
            raise UsageError(f"job file(s) not found: {', '.join(missing)}", "check files=")
        from nvflare.app_opt.pt.recipes.fedavg import FedAvgRecipe
        from nvflare.recipe import set_per_site_config

        self.recipe = FedAvgRecipe(
            name=name,
            model=model,
            min_clients=len(sites),
            num_rounds=num_rounds,
            train_script=self.scripts[sites[0].name],
            launch_external_process=True,
            command=sites[0].command(python),
            shutdown_timeout=shutdown_timeout,
            **dict(recipe_options or {}),
        )
        set_per_site_config(
            self.recipe,
            {
                s.name: {
                    "train_script": self.scripts[s.name],
                    "train_args": s.args,
                    "command": s.command(python),
                }
                for s in sites
            },
        )
        # FLARE copies the source of every component class outside nvflare into the job's
        # custom/ folder and follows its imports: a torch.nn model drew in torch, numpy, sympy…
        # (1,300 files, ~17 s per export). Installed packages are what the sites install, not
        # job code; the user's own modules are still shipped.
        fed_job = getattr(self.recipe, "_job", None)
        if fed_job is not None and hasattr(fed_job, "set_app_packages"):
            fed_job.set_app_packages(sorted(metadata.packages_distributions()))
        for file in files:  # modules the scripts import, shipped next to them in custom/
            self.recipe.add_client_file(str(Path(file).resolve()))

    @staticmethod
    def _existing(site: Site, script: str) -> str:
        path = Path(script)
        if not path.is_file():
            raise UsageError(
                f"site {site.name}: training script {script!r} not found",
                "check the path (relative to the current directory)",
            )
        return str(path.resolve())

    def table(self) -> str:
        """Per-site topology: launcher, nodes x processes, ranks, script, arguments."""
        return site_table(self.sites, self.script)

    def check_here(self, environ: Mapping[str, str] | None = None) -> None:
        """Refuse a site this machine cannot host (SimEnv and POC run every site here)."""
        env = os.environ if environ is None else environ
        cpus, gpus = os.cpu_count() or 1, gpu_count()
        for site in self.sites:
            problem = capacity_problem(site, env, cpus, gpus)
            if problem:
                raise problem

    def export(self, job_dir: str | os.PathLike[str]) -> Path:
        """Write the FLARE job folder (``recipe.export``); returns ``job_dir/<name>``."""
        self.recipe.export(job_dir=str(job_dir))
        return Path(job_dir) / self.name

    def simulate(self, workspace: str | os.PathLike[str]) -> Path:
        """Run every site in FLARE's simulator; returns the workspace of the job."""
        from nvflare.recipe import SimEnv

        self.check_here()
        env = SimEnv(clients=[s.name for s in self.sites], workspace_root=str(workspace))
        root = Path(workspace) / self.name
        watchdog = _SiteWatchdog(root, grace=float(os.environ.get(GRACE_ENV, SIMULATION_GRACE)))
        watchdog.start()
        try:
            run = self.recipe.run(env)
            error = ""
        except RuntimeError as err:
            error = str(err)
        finally:
            watchdog.stop()
        failures = failed_sites(root)  # FLARE may call a run whose site never started a success
        if error or failures:
            raise NoderunError(
                f"FLARE simulation of {self.name} failed: "
                + ("; ".join(failures) if failures else error),
                f"see the site logs under {root}",
            )
        return Path(str(run.get_result()))

    def poc(self, timeout: float = 0.0) -> tuple[str | None, Path | None]:
        """Run in FLARE's POC mode (server and clients as processes); (status, result dir).

        FLARE's own commands start and stop the services; ``NVFLARE_POC_WORKSPACE`` picks the
        folder (default /tmp/nvflare/poc)."""
        from nvflare.recipe import PocEnv

        self.check_here()
        env = PocEnv(clients=[s.name for s in self.sites])
        run = self.recipe.run(env)
        try:
            result = run.get_result(timeout=timeout, clean_up=False)
        finally:
            env.stop(clean_up=False)
        return run.get_status(), Path(result) if result else None


class _SiteWatchdog(threading.Thread):
    """Ends a simulation whose server waits for a site that died before its first task.

    FLARE's simulator hears of a site's failure during a round, but not of one whose trainer
    never completed its handshake: the server then waits for that site's result for ever.
    Polls the sites' run.json; after a failure and ``grace`` seconds, terminates the
    simulator processes (this process's children in ``root``) and everything they started (the
    sites' launchers and ranks, which would otherwise outlive the simulation by seconds)."""

    def __init__(self, root: Path, poll: float = 1.0, grace: float = SIMULATION_GRACE):
        super().__init__(daemon=True, name="noderun-flare-watchdog")
        self.root, self.poll, self.grace = root, poll, grace
        self._done = threading.Event()

    def run(self) -> None:
        failed_at = None
        while not self._done.wait(self.poll):
            if failed_at is None and failed_sites(self.root):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > self.grace:
                self._terminate()
                return

    def _terminate(self) -> None:
        import psutil

        marker = str(self.root.parent)
        children = psutil.Process().children(recursive=True)
        simulator = {p.pid for p in children if any(marker in part for part in _cmdline(p))}
        # and what they started: a site's launcher, its agent and ranks name no workspace
        procs = [p for p in children if p.pid in simulator or _parents(p) & simulator]
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(procs, timeout=10)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()

    def stop(self) -> None:
        self._done.set()
        self.join()


def _parents(proc: Any) -> set[int]:
    try:
        return {parent.pid for parent in proc.parents()}
    except Exception:  # gone meanwhile
        return set()


def _cmdline(proc: Any) -> list[str]:
    try:
        return list(proc.cmdline())
    except Exception:  # gone meanwhile, or not ours to read
        return []


def failed_sites(workspace: Path) -> list[str]:
    """``site: reason`` for every site whose noderun job under ``workspace`` failed."""
    found = []
    for run_json in sorted(workspace.rglob(f"runs/*/{rundir.RUN_JSON}")):
        record = rundir.read_json(run_json)
        if record.get("status") not in ("completed", "running"):
            failure = record.get("failure") or {}
            site = run_json.parent.name.rsplit("-", 2)[0]
            found.append(f"{site}: {failure.get('reason', record.get('status'))}")
    return found
