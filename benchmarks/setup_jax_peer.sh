#!/usr/bin/env bash
# Sets up the peer of benchmarks/jsp_vs_jax.py: the public JAX code of JSP-GFN (Deleu et al. 2023,
# https://github.com/tristandeleu/jax-jsp-gfn) at the pinned commit, and a virtual environment with the versions that
# run it unchanged (from PyPI). Nothing of the public code is copied into this repository: it is cloned from GitHub into
# a folder of your choice, outside the repository by default.
#
# usage: benchmarks/setup_jax_peer.sh [--dir PATH] [--venv PATH] [--python PYTHON] [--from URL_OR_PATH]
#   --dir     where the checkout goes        (default: ../jax-jsp-gfn beside this repository; env JAX_PEER_DIR)
#   --venv    where its virtual environment goes (default: ../jax-jsp-gfn-venv;               env JAX_PEER_VENV)
#   --python  the interpreter that makes it  (default: python3.11; jaxlib 0.4.13 has wheels for 3.8-3.11; env JAX_PEER_PYTHON)
#   --from    where to clone from            (default: the GitHub URL; a local mirror works too;  env JAX_PEER_FROM)
#
# Idempotent: an existing checkout of the repository is fetched (only when the commit is missing) and checked out at the
# commit; an existing virtual environment is reused and its pins re-applied (pip does nothing when they hold). A
# checkout with local changes, or a folder that is not a git checkout, is refused rather than overwritten.
# At the end it checks the imports and prints the jsp_vs_jax.py command line.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
URL="https://github.com/tristandeleu/jax-jsp-gfn"
COMMIT="d53b3b6"
DIR="${JAX_PEER_DIR:-$(dirname "$REPO_ROOT")/jax-jsp-gfn}"
VENV="${JAX_PEER_VENV:-$(dirname "$REPO_ROOT")/jax-jsp-gfn-venv}"
PYTHON="${JAX_PEER_PYTHON:-python3.11}"
FROM="${JAX_PEER_FROM:-$URL}"
# optax 0.1.4 is the public code's pin and needs a JAX that still has jnp.DeviceArray (removed after 0.4.13);
# ml_dtypes < 0.3 because jax 0.4.13 uses ml_dtypes.float8_e4m3b11; numpy < 2 because the public code uses np.float_.
PINS=(jax==0.4.13 jaxlib==0.4.13 ml_dtypes==0.2.0 dm-haiku==0.0.10 chex==0.1.82 optax==0.1.4 jraph==0.0.6.dev0
      gym==0.26.2 pandas==2.2.3 numpy==1.26.4 scipy==1.11.4 tqdm==4.67.1)

die() { echo "setup_jax_peer: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="${2:?--dir needs a path}"; shift 2 ;;
    --venv) VENV="${2:?--venv needs a path}"; shift 2 ;;
    --python) PYTHON="${2:?--python needs an interpreter}"; shift 2 ;;
    --from) FROM="${2:?--from needs a URL or path}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

command -v git >/dev/null 2>&1 || die "git not found; install git"
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python 3.11 (jaxlib 0.4.13 has wheels for 3.8-3.11) or give --python"
"$PYTHON" -c 'import sys; sys.exit(not ((3, 8) <= sys.version_info[:2] <= (3, 11)))' \
  || die "$PYTHON is Python $("$PYTHON" -c 'import platform; print(platform.python_version())'); jaxlib 0.4.13 needs 3.8-3.11: give --python python3.11"

# 1. the public code at the pinned commit
if [ -e "$DIR" ] && [ ! -d "$DIR/.git" ]; then
  die "$DIR exists and is not a git checkout; give another --dir or remove it"
fi
if [ ! -d "$DIR/.git" ]; then
  echo "setup_jax_peer: cloning $FROM into $DIR"
  git clone --quiet "$FROM" "$DIR"
fi
if ! git -C "$DIR" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
  echo "setup_jax_peer: fetching $FROM into $DIR (commit $COMMIT missing)"
  git -C "$DIR" fetch --quiet "$FROM"
  git -C "$DIR" cat-file -e "$COMMIT^{commit}" 2>/dev/null || die "commit $COMMIT is not in $FROM"
fi
[ -z "$(git -C "$DIR" status --porcelain --untracked-files=no)" ] || die "$DIR has local changes; the benchmark runs the public code unchanged: stash or discard them"
git -C "$DIR" -c advice.detachedHead=false checkout --quiet --detach "$COMMIT"
[ -f "$DIR/dag_gflownet/gflownet.py" ] || die "$DIR at $COMMIT holds no dag_gflownet/gflownet.py"

# 2. its virtual environment
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup_jax_peer: creating the virtual environment $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -c 'import sys; sys.exit(not ((3, 8) <= sys.version_info[:2] <= (3, 11)))' \
  || die "$VENV is not Python 3.8-3.11; remove it or give another --venv"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"

# 3. the check: the modules the benchmark imports, and the versions
(cd "$DIR" && "$VENV/bin/python" -c 'import jax, jaxlib, haiku, optax, chex, numpy
import dag_gflownet.gflownet, dag_gflownet.env, dag_gflownet.utils.factories, dag_gflownet.utils.replay_buffer
print(f"setup_jax_peer: ok: jax {jax.__version__}, jaxlib {jaxlib.__version__}, dm-haiku {haiku.__version__}, optax {optax.__version__}, chex {chex.__version__}, numpy {numpy.__version__}")') \
  || die "the public code does not import in $VENV (see above)"
echo "setup_jax_peer: $DIR at $(git -C "$DIR" rev-parse HEAD)"
echo "Run the benchmark from the repository root ($REPO_ROOT), with this project's environment active:"
printf '  PYTHONPATH=. python benchmarks/jsp_vs_jax.py --jax-checkout %q --jax-python %q\n' "$(cd "$DIR" && pwd)" "$(cd "$VENV" && pwd)/bin/python"
echo "  (add --d 20 --updates 10 --rounds 2 for d = 20; see the module docstring)"
