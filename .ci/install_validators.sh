#!/usr/bin/env bash
# Install the REAL consumers of the emitted launch configs (tests/consumers/) into the
# CURRENT Python environment: torch (CPU), megatron-core, DeepSpeed, torchtitan, JAX, MaxText.
#
#   pip install '.[test]' && bash .ci/install_validators.sh && PLANNER_REQUIRE_CONSUMERS=1 pytest
#
# Works on a fresh machine with only Python 3.11 + pip; idempotent (a second run installs
# nothing and takes seconds). See docs/launchers.md and shared/reference/launchers.md.
#
# The one rule: torch stays 2.13.0 (the CPU wheel served locally). An unpinned torch pulls the
# registry's CUDA build (GBs). Every install below runs under a constraints file pinning torch,
# exported as PIP_CONSTRAINT so that build environments honour it too, and the packages whose
# metadata would drag in more (megatron-core, maxtext) are installed with --no-deps.
set -euo pipefail

PY="${PYTHON:-python}"
pip_() { "$PY" -m pip install --disable-pip-version-check --progress-bar off "$@"; }

TORCH=2.13.0
MCORE=0.19.2
DEEPSPEED=0.19.8
TORCHTITAN=0.3.0
JAX=0.10.2
MAXTEXT=0.2.5
TRITON=3.9.0

CONSTRAINTS="$(mktemp -t planner-constraints.XXXXXX)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==${TORCH}" >"$CONSTRAINTS"
export PIP_CONSTRAINT="$CONSTRAINTS"

# version of an installed distribution, or empty
have() { "$PY" - "$1" <<'PYEOF' 2>/dev/null || true
import sys, importlib.metadata as m
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass
PYEOF
}
step() { printf '== %s (%ss)\n' "$*" "$SECONDS"; }

step "torch ${TORCH} (CPU)"
case "$(have torch)" in
  "${TORCH}"*) echo "torch $(have torch) already installed" ;;
  *) pip_ "torch==${TORCH}" ;;
esac

step "build tools, triton (megatron.core.transformer.moe and torchtitan import it; no kernel runs)"
pip_ setuptools wheel numpy packaging "triton==${TRITON}"

step "megatron-core ${MCORE} (metadata says Python>=3.12; the cp311 wheel works: --no-deps)"
if [ "$(have megatron-core)" != "${MCORE}" ]; then
  pip_ --no-deps --ignore-requires-python "megatron-core==${MCORE}"
fi
pip_ einops

step "deepspeed ${DEEPSPEED} (sdist; no CUDA ops built)"
if [ "$(have deepspeed)" != "${DEEPSPEED}" ]; then
  DS_BUILD_OPS=0 DS_SKIP_CUDA_CHECK=1 pip_ --no-build-isolation "deepspeed==${DEEPSPEED}"
fi

step "torchtitan ${TORCHTITAN} + torchao (its Float8 configs import it)"
if [ "$(have torchtitan)" != "${TORCHTITAN}" ]; then
  pip_ "torchtitan==${TORCHTITAN}"
fi
[ -n "$(have torchao)" ] || pip_ torchao

step "transformers (Hugging Face config checks; must not touch torch)"
[ -n "$(have transformers)" ] || pip_ transformers

step "jax ${JAX} + MaxText ${MAXTEXT} (--no-deps; its runtime deps listed by hand)"
pip_ "jax==${JAX}" "jaxlib==${JAX}" flax orbax-checkpoint etils pathwaysutils absl-py omegaconf pydantic jinja2 pyyaml
if [ "$(have maxtext)" != "${MAXTEXT}" ]; then
  pip_ --no-deps --ignore-requires-python "maxtext==${MAXTEXT}"
fi

step "check (versions, and that each consumer imports)"
"$PY" - <<'PYEOF'
import importlib.metadata as m
want = {"torch": "2.13.0", "megatron-core": "0.19.2", "deepspeed": "0.19.8",
        "torchtitan": "0.3.0", "jax": "0.10.2", "maxtext": "0.2.5", "torchao": "", "transformers": ""}
bad = []
for name, v in want.items():
    got = m.version(name)
    print(f"{name:14s} {got}")
    if not got.startswith(v):
        bad.append(f"{name} {got} (want {v})")
import torch
import deepspeed, jax, megatron.core, torchtitan, transformers  # noqa: F401,E401
from maxtext.configs import pyconfig  # noqa: F401
if torch.version.cuda is not None:
    bad.append(f"torch is a CUDA build ({torch.__version__})")
if bad:
    raise SystemExit("install_validators: " + "; ".join(bad))
PYEOF
step "done"
