# Shared by the test suites' install scripts (tests/runtimes/install.sh,
# tests/cluster/install.sh): timed steps, Debian packages installed only if
# missing, and the check that Go is there. Sourced, not run; the script that
# sources it sets `step_prefix` (how its lines start) first.

step_start=0
cpu_start=0
cpu=0
_times_file=$(mktemp)
trap 'rm -f "$_times_file"' EXIT

# User and system seconds of this shell's finished children (the builds),
# from the builtin `times` run in this shell (not in a subshell, whose
# children are not these). Sets `cpu`.
cpu_seconds() {
    times >"$_times_file"
    cpu=$(awk 'NR == 2 { n = split($0, f, /[ ms]+/); t = 0; for (i = 1; i + 1 <= n; i += 2) t += f[i] * 60 + f[i + 1]; printf "%d", t }' "$_times_file")
}

begin() {
    step_start=$SECONDS
    cpu_seconds
    cpu_start=$cpu
    echo "$step_prefix: $*"
}

done_step() {
    cpu_seconds
    echo "$step_prefix:   done in $((SECONDS - step_start)) s wall, $((cpu - cpu_start)) s CPU"
}

# Debian packages, only those missing. Another apt may hold the lock for a
# while on a shared machine.
debian_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    begin "Debian packages: ${missing[*]}"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
    done_step
}

# Fails, saying what for, unless Go is installed.
need_go() {
    command -v go >/dev/null || {
        echo "$step_prefix: go is not installed; $* are built from their Go modules" >&2
        exit 1
    }
}
