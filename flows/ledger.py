"""The run ledger: a small JSON file per pipeline run that `llp status` reads without any server."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


class Ledger:
    def __init__(self, path: Path):
        self.path = path
        self.data = json.loads(path.read_text()) if path.exists() else {"stages": {}}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str))
        os.replace(tmp, self.path)

    def set(self, **fields) -> None:
        self.data.update(fields)
        self.save()

    def stage(self, name: str) -> dict:
        return self.data["stages"].setdefault(name, {"state": "pending", "executions": 0, "attempts": []})

    def stage_started(self, name: str, attempt: int) -> None:
        st = self.stage(name)
        st["executions"] += 1
        st["attempts"].append({"attempt": attempt, "started": time.time()})
        st.update(state="running", started=st.get("started") or time.time())
        self.save()

    def stage_update(self, name: str, **fields) -> None:
        self.stage(name).update(fields)
        self.save()
