# .ci/leg_common.sh — helpers sourced by every .ci/legs/*.sh (set `leg` before sourcing):
# say/fail print with the leg's name; install_missing installs the given Debian packages
# that are not installed yet (apt-get update only then), as root or through sudo;
# kernel_tests prints the kernel test names, one per line.
say() { printf '[%s leg] %s\n' "$leg" "$*"; }
fail() { say "FAILED: $*"; exit 1; }

install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    local sudo=""
    [[ $(id -u) == 0 ]] || sudo=sudo
    say "installing: ${missing[*]}"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "packages present: $*"
  fi
}

# The kernel tests: test_<name> for every include/sprig/kernels/<name>.hpp that has a
# tests/test_<name>.cpp, plus the oracle test, so new kernel test files are picked up.
kernel_tests() {
  local h n found=0
  for h in include/sprig/kernels/*.hpp; do
    n=$(basename "$h" .hpp)
    [[ -f tests/test_$n.cpp ]] || continue
    echo "test_$n"
    [[ $n == reference ]] && found=1
  done
  ((found)) || echo test_reference
}
