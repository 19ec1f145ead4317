"""Import a stream definition in a child process, bounded in time, before a driver is started for it.

The user's module runs arbitrary code at import. Imported in the control plane itself (the CLI, a Dagster run), a
module that loops would hang it, and one that calls ``sys.exit`` would end it without a word. Here it runs in a
child process with the driver's environment: it either answers within the timeout, or is killed and the error
names the module.

    python -m dagster_reconf.core.process.definition_probe SPEC_JSON
"""

from __future__ import annotations

import json
import subprocess
import sys

from dagster_reconf.core.errors import SpecError, StreamStartError
from dagster_reconf.core.spec import StreamSpec, validate_spec

__all__ = ["IMPORT_TIMEOUT_S", "probe_definition"]

IMPORT_TIMEOUT_S = 60.0


def probe_definition(spec: StreamSpec, env: dict[str, str], timeout_s: float = IMPORT_TIMEOUT_S) -> frozenset[str]:
    """Validate ``spec`` against its definition, imported in a child process; the definition's frozen options.

    Raises:
        SpecError: the spec does not fit the definition, or the entrypoint does not name one.
        StreamStartError: the module raised, exited or did not finish importing within ``timeout_s``.
    """
    command = [sys.executable, "-m", __name__, spec.model_dump_json()]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise StreamStartError(
            f"importing the stream definition {spec.entrypoint!r} did not finish within {timeout_s:g} s (the "
            "import was stopped): does its module loop, or wait for something, when it is imported?"
        ) from None
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        answer = {}
    if "frozen_options" in answer:
        return frozenset(answer["frozen_options"])
    if answer.get("error") == "SpecError":
        raise SpecError(answer["message"])
    message = answer.get("message") or (
        f"importing the stream definition {spec.entrypoint!r} ended the process (exit code {done.returncode}) "
        f"without an answer: {(done.stderr.strip().splitlines() or ['no output'])[-1]}"
    )
    raise StreamStartError(message)


def main(argv: list[str]) -> int:
    spec = StreamSpec.parse(json.loads(argv[0]))
    try:
        definition = validate_spec(spec)
    except (SpecError, StreamStartError) as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        return 1
    print(json.dumps({"frozen_options": sorted(definition.frozen_options)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
