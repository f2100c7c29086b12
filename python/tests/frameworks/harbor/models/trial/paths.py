"""Stand-in for harbor.models.trial.paths (see ../../../README.md)."""

from dataclasses import dataclass
from pathlib import Path


class EnvironmentPaths:
    agent_dir = Path("/logs/agent")
    verifier_dir = Path("/logs/verifier")
    artifacts_dir = Path("/logs/artifacts")
    tests_dir = Path("/tests")
    solution_dir = Path("/solution")


@dataclass
class TrialPaths:
    trial_dir: Path

    @property
    def agent_dir(self) -> Path:
        return self.trial_dir / "agent"

    @property
    def verifier_dir(self) -> Path:
        return self.trial_dir / "verifier"

    @property
    def artifacts_dir(self) -> Path:
        return self.trial_dir / "artifacts"
