"""Drives the real hermes-agent (installed from PyPI in a virtual environment) for berth's interop tests.

Each call prints one JSON object on stdout. The profile is hermes's own: HERMES_HOME points at
``$HOME/.hermes/profiles/<profile>``, so ``get_active_profile_name()`` resolves it without patching anything.

  driver.py exec <image> <task> <network:0|1> <command>   DockerEnvironment(...).execute(command)
  driver.py reap <max_age_seconds> <profile>              reap_orphan_containers(...)
  driver.py default-config                                hermes writes its full default config.yaml
  driver.py version                                       the installed hermes-agent version
"""

import json
import sys


def main() -> int:
    op = sys.argv[1]
    if op == "version":
        from importlib.metadata import version

        print(json.dumps({"version": version("hermes-agent")}))
        return 0
    if op == "exec":
        from tools.environments.docker import DockerEnvironment

        image, task, network, command = sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]
        # The arguments terminal_tool passes with hermes's defaults (smaller memory, no disk quota, for tests).
        env = DockerEnvironment(
            image=image,
            cwd="/root",
            timeout=60,
            cpu=1,
            memory=256,
            disk=0,
            persistent_filesystem=True,
            task_id=task,
            network=network,
            persist_across_processes=True,
        )
        result = env.execute(command)
        print(json.dumps({"container_id": env._container_id, "output": result.get("output", ""),
                          "returncode": result.get("returncode")}))
        return 0
    if op == "default-config":
        # hermes's own writer with its own defaults (strip_defaults=False keeps every default in the file).
        from hermes_cli.config import DEFAULT_CONFIG, get_config_path, save_config

        save_config(DEFAULT_CONFIG, strip_defaults=False)
        print(json.dumps({"path": str(get_config_path())}))
        return 0
    if op == "reap":
        from tools.environments.docker import reap_orphan_containers

        removed = reap_orphan_containers(max_age_seconds=int(sys.argv[2]), profile_filter=sys.argv[3])
        print(json.dumps({"removed": removed}))
        return 0
    print(json.dumps({"error": f"unknown op {op}"}))
    return 2


if __name__ == "__main__":
    sys.exit(main())
