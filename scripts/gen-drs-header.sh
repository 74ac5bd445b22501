#!/usr/bin/env bash
# Regenerates crates/drs/include/drs.h from crates/drs/src/ffi.rs.
set -euo pipefail
cd "$(dirname "$0")/../crates/drs"
command -v cbindgen >/dev/null || cargo install cbindgen --locked
cbindgen --config cbindgen.toml --output include/drs.h src/ffi.rs
