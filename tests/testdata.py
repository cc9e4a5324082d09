"""Where the tests' own fixtures live: everything a test reads is under tests/data/, so a clone in any
folder runs the suite (no read of the workspace's shared/reference; tests/data/reference/README.md says
what was copied from it and from which sources)."""

from __future__ import annotations

from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
DATA_DIR = TESTS_DIR / "data"
REFERENCE_DIR = DATA_DIR / "reference"  # verbatim copies of shared/reference files, citations kept
HF_CONFIGS_DIR = REFERENCE_DIR / "hf_configs"
NCCL_TESTS_DIR = REFERENCE_DIR / "nccl_tests"
MODELS_YAML = REFERENCE_DIR / "models.yaml"

# the 19 Hugging Face config.json transcriptions of shared/reference/hf_configs (tests/data/reference/README.md)
HF_CONFIG_FILES = sorted(HF_CONFIGS_DIR.glob("*.json"))
N_HF_CONFIGS = 19
