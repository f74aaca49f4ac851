// Agent driver `js-shell`, in JavaScript: runs `agent.options.command` in the run's
// sandbox.
//
// Built for the world `agent-driver`, so the component imports `events` and `sandbox`
// and needs exactly those grants. The host forwards `sandbox.exec` to whichever
// provider made the run's sandbox; this driver reads the command's output as it
// arrives, reports each line as an event and returns the outcome. The prompt is on the
// command's stdin and in `AGENTGATE_PROMPT`.

import { emit } from "agentgate:plugin/events@0.1.0";
import { details, exec } from "agentgate:plugin/sandbox@0.1.0";

const OPTIONS_SCHEMA = JSON.stringify({
  type: "object",
  additionalProperties: false,
  required: ["command"],
  properties: {
    command: {
      description: "Program and arguments to run as the agent.",
      type: "array",
      items: { type: "string" },
      minItems: 1,
    },
  },
});

// Yields [pipe, line] for each complete output line, then ["exit", status].
function* lines(execution) {
  const decoder = new TextDecoder();
  const pending = { stdout: "", stderr: "" };
  for (;;) {
    const out = execution.read(1000);
    if (out.tag === "chunk") {
      const text = pending[out.val.pipe] + decoder.decode(out.val.data);
      const parts = text.split("\n");
      pending[out.val.pipe] = parts.pop();
      for (const line of parts) yield [out.val.pipe, line];
    } else if (out.tag === "exited") {
      for (const [pipe, rest] of Object.entries(pending)) if (rest) yield [pipe, rest];
      yield ["exit", out.val];
      return;
    }
  }
}

export const driver = {
  run(task) {
    const command = JSON.parse(task.options).command;
    if (!command || command.length === 0) {
      throw { tag: "invalid-spec", val: { path: "options.command", message: "is required" } };
    }
    const where = details();
    // Goes to the run's plugins.log: built with `--disable http fetch-event`, the
    // component keeps WASI stdio, which the host captures.
    console.log(`js-shell: running ${command[0]} in ${where.provider} sandbox ${where.id}`);
    const execution = exec({
      argv: command,
      env: [{ name: "AGENTGATE_PROMPT", value: task.prompt }],
      cwd: undefined,
      stdin: new TextEncoder().encode(task.prompt),
      keepStdinOpen: false,
      timeoutMs: task.timeoutMs,
    });
    let last;
    let code = -1;
    for (const [pipe, item] of lines(execution)) {
      if (pipe === "exit") {
        code = item.code ?? -1;
      } else {
        emit({ tag: "output", val: [pipe, item] });
        if (pipe === "stdout" && item.trim()) last = item;
      }
    }
    if (last) emit({ tag: "agent-message", val: last });
    return { exitCode: code, success: code === 0, sessionId: undefined, turns: undefined, usage: undefined, summary: last };
  },
};

export function describe() {
  return {
    name: "js-shell",
    version: "0.1.0",
    kind: "agent-driver",
    serves: ["js-shell"],
    summary: "Example driver in JavaScript: runs agent.options.command in the run's sandbox",
    optionsSchema: OPTIONS_SCHEMA,
  };
}
