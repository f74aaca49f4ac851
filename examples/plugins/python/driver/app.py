"""Agent driver `py-shell`, in Python: runs `agent.options.command` in the run's sandbox.

Built for the world `agent-driver`, so the component imports `events` and `sandbox` and
needs exactly those grants. The host forwards `sandbox.exec` to whichever provider made
the run's sandbox; this driver reads the command's output as it arrives, reports each
line as an event and returns the outcome. The prompt is on the command's stdin and in
`AGENTGATE_PROMPT`.
"""

import json

from componentize_py_types import Err
from wit_world import WitWorld as World
from wit_world.exports import Driver as DriverInterface
from wit_world.exports import driver
from wit_world.imports import events, execution, sandbox, types

OPTIONS_SCHEMA = json.dumps(
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["command"],
        "properties": {
            "command": {
                "description": "Program and arguments to run as the agent.",
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
            }
        },
    }
)


def lines(run: execution.Execution):
    """Yields (pipe, line) for each complete output line, then ("exit", status)."""
    pending = {types.OutputPipe.STDOUT: b"", types.OutputPipe.STDERR: b""}
    while True:
        out = run.read(1000)
        if isinstance(out, execution.Output_Chunk):
            data = pending[out.value.pipe] + out.value.data
            *complete, pending[out.value.pipe] = data.split(b"\n")
            for line in complete:
                yield out.value.pipe, line.decode("utf-8", "replace")
        elif isinstance(out, execution.Output_Exited):
            for pipe, rest in pending.items():
                if rest:
                    yield pipe, rest.decode("utf-8", "replace")
            yield "exit", out.value
            return


class Driver(DriverInterface):
    def run(self, task: driver.AgentTask) -> driver.AgentOutcome:
        command = json.loads(task.options).get("command")
        if not command:
            raise Err(types.Error_InvalidSpec(types.FieldError("options.command", "is required")))
        where = sandbox.details()
        # Goes to the run's plugins.log (WASI stdout is captured by the host).
        print(f"py-shell: running {command[0]} in {where.provider} sandbox {where.id}")
        run = sandbox.exec(
            types.ExecRequest(
                argv=command,
                env=[types.EnvVar("AGENTGATE_PROMPT", task.prompt)],
                cwd=None,
                stdin=task.prompt.encode(),
                keep_stdin_open=False,
                timeout_ms=task.timeout_ms,
            )
        )
        last, code = None, -1
        for pipe, item in lines(run):
            if pipe == "exit":
                code = item.code if item.code is not None else -1
            else:
                events.emit(events.Event_Output((pipe, item)))
                if pipe == types.OutputPipe.STDOUT and item.strip():
                    last = item
        if last:
            events.emit(events.Event_AgentMessage(last))
        return driver.AgentOutcome(
            exit_code=code, success=code == 0, session_id=None, turns=None, usage=None, summary=last
        )


class WitWorld(World):
    def describe(self) -> types.PluginInfo:
        return types.PluginInfo(
            name="py-shell",
            version="0.1.0",
            kind=types.PluginKind.AGENT_DRIVER,
            serves=["py-shell"],
            summary="Example driver in Python: runs agent.options.command in the run's sandbox",
            options_schema=OPTIONS_SCHEMA,
        )
