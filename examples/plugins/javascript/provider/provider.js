// Sandbox provider `js-sealed`, in JavaScript: commands sealed by the host's `process`.
//
// Built for the world `process-sandbox-provider`, so the component imports `events` and
// `process` and needs exactly those grants. The host does the sealing (bubblewrap
// namespaces, seccomp, a cgroup); this plugin only decides what goes in: the workspace
// at `workdir`, a private HOME backed by the sandbox's state dir, the TaskSpec's
// mounts, limits and network.
//
// componentize-js conventions: an exported interface is an exported object named after
// it (`provider`), an exported resource a class on that object (`Sandbox`); a WIT
// `result` fails by throwing its error value; variants are `{ tag, val }`, enums are
// strings, u64 values are BigInt and list<u8> is a Uint8Array.

import { emit } from "agentgate:plugin/events@0.1.0";
import { spawn, usage, killAll } from "agentgate:plugin/process@0.1.0";

const HOME = "/home/agent";
const PATH = "/usr/local/bin:/usr/bin:/bin";

class Sandbox {
  constructor(request) {
    this.id = `js-sealed-${request.runId}`;
    this.workdir = request.workdir;
    this.env = [
      { name: "PATH", value: PATH },
      { name: "HOME", value: HOME },
      { name: "TMPDIR", value: "/tmp" },
      ...request.env,
    ];
    const r = request.resources;
    this.isolation = {
      sealed: {
        binds: [
          { source: request.workspace.hostPath, target: request.workdir, readonly: request.workspace.readonly },
          { source: request.stateDir, target: HOME, readonly: false },
          ...request.mounts,
        ],
      },
      limits: { cpuMillicores: r.cpuMillicores, memoryBytes: r.memoryBytes, diskBytes: undefined, pids: r.pids, timeoutMs: undefined },
      network: request.network,
    };
  }

  summary() {
    return {
      id: this.id,
      workdir: this.workdir,
      isolation: `js-sealed: sealed by the host's process capability (bubblewrap, seccomp, cgroup), workspace at ${this.workdir}, network ${this.isolation.network}`,
    };
  }

  exec(request) {
    if (request.argv.length === 0) {
      throw { tag: "invalid-spec", val: { path: "argv", message: "the command is empty" } };
    }
    let cwd = request.cwd ?? this.workdir;
    if (!cwd.startsWith("/")) cwd = `${this.workdir.replace(/\/$/, "")}/${cwd}`;
    return spawn({
      argv: request.argv,
      cwd,
      env: [...this.env, ...request.env],
      inheritEnv: false,
      stdin: request.stdin,
      keepStdinOpen: request.keepStdinOpen,
      timeoutMs: request.timeoutMs,
      isolation: this.isolation,
    });
  }

  stats() {
    return usage();
  }

  destroy() {
    killAll();
  }
}

export const provider = {
  Sandbox,

  create(request) {
    if (request.resources.diskBytes !== undefined) {
      throw { tag: "unavailable", val: "js-sealed cannot enforce resources.disk; remove the limit" };
    }
    if (Object.keys(JSON.parse(request.options || "{}")).length > 0) {
      throw { tag: "invalid-spec", val: { path: "options", message: "js-sealed takes no options" } };
    }
    emit({ tag: "log", val: ["info", "js-sealed sandbox created"] });
    return new Sandbox(request);
  },

  // Nothing outlives a run: sealed processes die with their namespaces and cgroup, and
  // the host removes the state dir.
  listLeftovers() {
    return [];
  },

  reap(_id) {},
};

export function describe() {
  return {
    name: "js-sealed",
    version: "0.1.0",
    kind: "sandbox-provider",
    serves: ["js-sealed"],
    summary: "Example provider in JavaScript: sealed host processes through `process`",
    optionsSchema: undefined,
  };
}
