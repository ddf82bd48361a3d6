#!/usr/bin/env bash
# Regenerate the speech fixtures in tests/fixtures (see tests/fixtures/README.md).
#
#   scripts/make_fixtures.sh            # regenerate + verify (needs the Debian TTS packages)
#   scripts/make_fixtures.sh --install  # first apt-get install whatever of them is missing
#   scripts/make_fixtures.sh --check    # verify the committed files only (any other flag is
#                                       # passed to scripts/make_fixtures.py)
set -euo pipefail

PACKAGES=(sox libsox-fmt-base espeak-ng festival festvox-us-slt-hts festvox-kallpc16k flite)

install_missing() {
    local missing=() package
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$package")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    local sudo=()
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    echo "make_fixtures.sh: installing ${missing[*]}" >&2
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}"
}

if [[ ${1:-} == "--install" ]]; then
    shift
    install_missing
fi

exec python3 "$(dirname "$0")/make_fixtures.py" "$@"
