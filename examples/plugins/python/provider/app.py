"""Sandbox provider `py-sealed`, in Python: commands sealed by the host's `process`.

Built for the world `process-sandbox-provider`, so the component imports `events` and
`process` and needs exactly those grants. The host does the sealing (bubblewrap
namespaces, seccomp, a cgroup); this plugin only decides what goes in: the workspace at
`workdir`, a private HOME backed by the sandbox's state dir, the TaskSpec's mounts,
limits and network.
"""

import json

from componentize_py_types import Err
from wit_world import WitWorld as World
from wit_world.exports import provider
from wit_world.exports import Provider as ProviderInterface
from wit_world.imports import events, process, types

HOME = "/home/agent"
PATH = "/usr/local/bin:/usr/bin:/bin"


def failure(kind, message):
    """Raises one of the contract's `error` cases (`Err` is how a WIT `result` fails)."""
    raise Err(kind(message))


class Sandbox(provider.Sandbox):
    """The exported `sandbox` resource: one instance per `create`.

    componentize-py maps a WIT resource to a class: the host holds a handle, and each
    method call on it lands on this object.
    """

    def __init__(self, request: provider.SandboxRequest):
        self.id = "py-sealed-" + request.run_id
        self.workdir = request.workdir
        self.env = [
            types.EnvVar("PATH", PATH),
            types.EnvVar("HOME", HOME),
            types.EnvVar("TMPDIR", "/tmp"),
        ] + list(request.env)
        binds = [
            types.Mount(request.workspace.host_path, request.workdir, request.workspace.readonly),
            types.Mount(request.state_dir, HOME, False),
        ] + list(request.mounts)
        r = request.resources
        self.isolation = process.Isolation(
            sealed=process.SealedView(binds),
            limits=types.Resources(r.cpu_millicores, r.memory_bytes, None, r.pids, None),
            network=request.network,
        )

    def summary(self) -> provider.SandboxSummary:
        return provider.SandboxSummary(
            self.id,
            self.workdir,
            "py-sealed: sealed by the host's process capability (bubblewrap, seccomp, cgroup), "
            f"workspace at {self.workdir}, network {self.isolation.network.name.lower()}",
        )

    def exec(self, request: types.ExecRequest):
        if not request.argv:
            failure(lambda m: types.Error_InvalidSpec(types.FieldError("argv", m)), "the command is empty")
        cwd = request.cwd or self.workdir
        if not cwd.startswith("/"):
            cwd = self.workdir.rstrip("/") + "/" + cwd
        env = self.env + list(request.env)
        return process.spawn(
            process.SpawnRequest(
                argv=request.argv,
                cwd=cwd,
                env=env,
                inherit_env=False,
                stdin=request.stdin,
                keep_stdin_open=request.keep_stdin_open,
                timeout_ms=request.timeout_ms,
                isolation=self.isolation,
            )
        )

    def stats(self) -> types.ResourceUsage:
        return process.usage()

    def destroy(self) -> None:
        process.kill_all()


class Provider(ProviderInterface):
    def create(self, request: provider.SandboxRequest) -> provider.Sandbox:
        if request.resources.disk_bytes is not None:
            failure(types.Error_Unavailable, "py-sealed cannot enforce resources.disk; remove the limit")
        if json.loads(request.options or "{}"):
            failure(lambda m: types.Error_InvalidSpec(types.FieldError("options", m)), "py-sealed takes no options")
        # Goes to the run's plugins.log (WASI stdout is captured by the host).
        print(f"py-sealed: creating {request.run_id} with workdir {request.workdir}")
        events.emit(events.Event_Log((events.LogLevel.INFO, "py-sealed sandbox created")))
        return Sandbox(request)

    def list_leftovers(self):
        # Nothing outlives a run: sealed processes die with their namespaces and cgroup,
        # and the host removes the state dir.
        return []

    def reap(self, id: str) -> None:
        return None


class WitWorld(World):
    def describe(self) -> types.PluginInfo:
        return types.PluginInfo(
            name="py-sealed",
            version="0.1.0",
            kind=types.PluginKind.SANDBOX_PROVIDER,
            serves=["py-sealed"],
            summary="Example provider in Python: sealed host processes through `process`",
            options_schema=None,
        )
