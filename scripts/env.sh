# Sourced by the project's scripts: build folder, parallelism, and Open MPI's consent to run as root
# (these machines and many containers run as root; mpirun refuses without it).
PETS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PETS_BUILD="${PETS_BUILD:-$PETS_ROOT/build}"
PETS_JOBS="${PETS_JOBS:-$(nproc)}"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

pets_build() {
  "$PETS_ROOT/scripts/install_deps.sh"
  local generator=()
  if [ ! -f "$PETS_BUILD/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
  cmake -S "$PETS_ROOT" -B "$PETS_BUILD" "${generator[@]}" "$@"
  cmake --build "$PETS_BUILD" --parallel "$PETS_JOBS"
}

# ccache: paths below the checkout hash as relative ones, so another clone of the same sources
# (CI's fresh clone, a second worktree) reuses the compilations already cached.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PETS_ROOT}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
