# Sets up and enters Sluice's development environment; sourced by the other dev/ scripts.
#
# Installs what is missing and nothing else: Gradle, a JDK, iperf3 and Chromium (apt), the
# virtualenv .venv, and the Python packages pyproject.toml and bench/pyproject.toml ask for (again
# only when one of them changed since they were installed). Then exports:
#   SLUICE_ROOT     the repository root
#   SPARK_JARS_DIR  the jars of .venv's pyspark, the JVM plugin's compile classpath
#   SPARK_LOCAL_IP  127.0.0.1 (this machine only has loopback networking); SPARK_HOME is unset
# and defines run_gradle (gradle with -PsparkJars) and run_config_docs (io.sluice.config.ConfigDocs).

# Strict mode for the scripts that source this; an interactive shell keeps its own settings.
[[ $- == *i* ]] || set -euo pipefail

SLUICE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SLUICE_ROOT
SLUICE_VENV="$SLUICE_ROOT/.venv"

sluice_log() { echo "[sluice] $*" >&2; }

sluice_apt_install() {
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
    sluice_log "installing $* with apt-get"
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

if ! command -v gradle >/dev/null 2>&1; then
    sluice_apt_install gradle
fi
if ! command -v javac >/dev/null 2>&1; then
    sluice_apt_install default-jdk-headless
fi
# `sluice-bench transport` compares one Sluice connection with iperf3's.
if ! command -v iperf3 >/dev/null 2>&1; then
    sluice_apt_install iperf3
fi
# The UI test renders the Sluice tab in headless Chromium.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    sluice_apt_install chromium
fi

if [[ ! -x "$SLUICE_VENV/bin/python" ]]; then
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        sluice_apt_install python3-venv
    fi
    sluice_log "creating $SLUICE_VENV"
    python3 -m venv "$SLUICE_VENV"
fi

# Python packages: the build requirements, the dependencies and the `test` extra of spark-sluice,
# and the dependencies of sluice-bench (bench/), all read from the two pyproject.toml files,
# installed again only when either changes.
SLUICE_DEPS_STAMP="$SLUICE_VENV/.sluice-deps"
sluice_deps_hash="$(cat "$SLUICE_ROOT/pyproject.toml" "$SLUICE_ROOT/bench/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$SLUICE_DEPS_STAMP" || "$(cat "$SLUICE_DEPS_STAMP")" != "$sluice_deps_hash" ]]; then
    sluice_log "installing Python packages into .venv (new venv, or a pyproject.toml changed)"
    "$SLUICE_VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
    if ! "$SLUICE_VENV/bin/python" -c 'import tomllib' >/dev/null 2>&1; then
        "$SLUICE_VENV/bin/python" -m pip install -q tomli
    fi
    mapfile -t sluice_requirements < <("$SLUICE_VENV/bin/python" - "$SLUICE_ROOT" <<'EOF'
import sys
try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib
with open(f"{sys.argv[1]}/pyproject.toml", "rb") as f:
    project = tomllib.load(f)
with open(f"{sys.argv[1]}/bench/pyproject.toml", "rb") as f:
    bench = tomllib.load(f)
requirements = project["build-system"]["requires"] + project["project"]["dependencies"]
requirements += project["project"]["optional-dependencies"]["test"]
# sluice-bench's own, but not spark-sluice itself, which dev/build installs from this checkout.
requirements += [r for r in bench["project"]["dependencies"] if r != project["project"]["name"]]
print("\n".join(requirements))
EOF
    )
    "$SLUICE_VENV/bin/python" -m pip install -q "${sluice_requirements[@]}"
    echo "$sluice_deps_hash" >"$SLUICE_DEPS_STAMP"
fi

export VIRTUAL_ENV="$SLUICE_VENV"
case ":$PATH:" in
    *":$SLUICE_VENV/bin:"*) ;;
    *) export PATH="$SLUICE_VENV/bin:$PATH" ;;
esac

export SPARK_LOCAL_IP=127.0.0.1
unset SPARK_HOME
export PYSPARK_PYTHON="$SLUICE_VENV/bin/python"

# Found without importing pyspark, which would take a second.
SPARK_JARS_DIR="$("$SLUICE_VENV/bin/python" -c 'import importlib.util, os
print(os.path.join(importlib.util.find_spec("pyspark").submodule_search_locations[0], "jars"))')"
export SPARK_JARS_DIR

# gradle, the way every dev/ script runs it.
run_gradle() {
    (cd "$SLUICE_ROOT" && gradle --no-daemon -q -PsparkJars="$SPARK_JARS_DIR" "$@")
}

# Regenerates the files derived from io.sluice.config.SluiceOptions (docs/configuration.md,
# python/sluice/_options.json, conf/sluice.conf.template); with --check, fails when they are stale.
# Needs the compiled main classes (run_gradle classes).
run_config_docs() {
    local scala_library
    scala_library="$(compgen -G "$SPARK_JARS_DIR/scala-library-2.13.*.jar" | head -n 1)"
    if [[ -z "$scala_library" ]]; then
        sluice_log "no scala-library-2.13.*.jar in $SPARK_JARS_DIR"
        return 1
    fi
    java -cp "$SLUICE_ROOT/build/classes/scala/main:$scala_library" \
        io.sluice.config.ConfigDocs "$SLUICE_ROOT" "$@"
}
