"""Repositories of the standalone WORKSPACE: everything local, nothing downloaded.

  xla_ffi_headers   @xla_ffi: the XLA FFI headers of the installed jaxlib, copied from
                    $XLA_FFI_INCLUDE_DIR, or from <jaxlib>/include as found by
                    $PYTHON_BIN_PATH / python3 (what jax.ffi.include_dir() returns).
  native_rules_cc   @rules_cc and @rules_java stand-ins that forward to the native rules. Bazel 4's
  native_rules_java own C++ / Java toolchain packages load these two repositories, which Bazel
                    would otherwise download from GitHub; the stand-ins make a C++ build work with
                    no network (Debian's bazel-bootstrap 4.2 ships neither).

muse_attn_workspace() declares them; a workspace that vendors jax_muse_attn may call it too, or
declare just @xla_ffi (or nothing, pointing //:xla_ffi at @xla//xla/ffi/api:ffi).
"""

_FIND_JAXLIB_INCLUDE = (
    "import os, jaxlib; print(os.path.join(os.path.dirname(jaxlib.__file__), 'include'))"
)

def _find_include_dir(rctx):
    if rctx.attr.path:
        return rctx.attr.path, "attribute path"
    env = rctx.os.environ.get("XLA_FFI_INCLUDE_DIR", "")
    if env:
        return env, "$XLA_FFI_INCLUDE_DIR"
    pythons = [rctx.os.environ.get("PYTHON_BIN_PATH", ""), "python3", "python"]
    errors = []
    for python in pythons:
        if not python:
            continue
        exe = python if "/" in python else rctx.which(python)
        if not exe:
            continue
        result = rctx.execute([exe, "-c", _FIND_JAXLIB_INCLUDE], quiet = True)
        if result.return_code == 0:
            return result.stdout.strip(), "jaxlib of %s" % exe
        lines = result.stderr.strip().splitlines()
        errors.append("%s: %s" % (exe, lines[-1] if lines else "failed"))
    fail("xla_ffi_headers: cannot find the XLA FFI headers: set XLA_FFI_INCLUDE_DIR to " +
         "`python -c \"import jax; print(jax.ffi.include_dir())\"`, or PYTHON_BIN_PATH to a " +
         "Python with jaxlib installed (tried: %s)" % ("; ".join(errors) or "no python found"))

def _xla_ffi_headers_impl(rctx):
    include_dir, how = _find_include_dir(rctx)
    api = rctx.path(include_dir + "/xla/ffi/api")
    if not api.get_child("ffi.h").exists:
        fail("xla_ffi_headers: %s (from %s) has no xla/ffi/api/ffi.h: install jaxlib" %
             (include_dir, how))

    # Copies, not symlinks: the repository stays valid if jaxlib moves, and `local = True`
    # refreshes it when Bazel re-fetches.
    for f in api.readdir():
        if f.basename.endswith(".h"):
            rctx.file("xla/ffi/api/" + f.basename, rctx.read(f), executable = False)
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)
    rctx.file("SOURCE", "XLA FFI headers copied from %s (%s)\n" % (include_dir, how))
    rctx.template("BUILD.bazel", rctx.attr.build_file)

xla_ffi_headers = repository_rule(
    implementation = _xla_ffi_headers_impl,
    attrs = {
        "path": attr.string(doc = "jaxlib's include dir; default: found as described above"),
        "build_file": attr.label(default = Label("//bazel:xla_ffi.BUILD")),
    },
    environ = ["XLA_FFI_INCLUDE_DIR", "PYTHON_BIN_PATH"],
    local = True,
)

_RULES_CC_DEFS = """\
# Stand-in for @rules_cc//cc:defs.bzl (jax_muse_attn bazel/repositories.bzl): the native rules.
def cc_binary(**attrs):
    native.cc_binary(**attrs)

def cc_import(**attrs):
    native.cc_import(**attrs)

def cc_library(**attrs):
    native.cc_library(**attrs)

def cc_proto_library(**attrs):
    native.cc_proto_library(**attrs)

def cc_test(**attrs):
    native.cc_test(**attrs)

def cc_toolchain(**attrs):
    native.cc_toolchain(**attrs)

def cc_toolchain_suite(**attrs):
    native.cc_toolchain_suite(**attrs)

def objc_library(**attrs):
    native.objc_library(**attrs)
"""

_RULES_JAVA_DEFS = """\
# Stand-in for @rules_java//java:defs.bzl (jax_muse_attn bazel/repositories.bzl): the native rules.
def java_binary(**attrs):
    native.java_binary(**attrs)

def java_import(**attrs):
    native.java_import(**attrs)

def java_library(**attrs):
    native.java_library(**attrs)

def java_plugin(**attrs):
    native.java_plugin(**attrs)

def java_proto_library(**attrs):
    native.java_proto_library(**attrs)

def java_runtime(**attrs):
    native.java_runtime(**attrs)

def java_test(**attrs):
    native.java_test(**attrs)

def java_toolchain(**attrs):
    native.java_toolchain(**attrs)
"""

def _stand_in(rctx, package, defs):
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)
    rctx.file("BUILD.bazel", "")
    rctx.file(package + "/BUILD.bazel", "")
    rctx.file(package + "/defs.bzl", defs)

def _native_rules_cc_impl(rctx):
    _stand_in(rctx, "cc", _RULES_CC_DEFS)

def _native_rules_java_impl(rctx):
    _stand_in(rctx, "java", _RULES_JAVA_DEFS)

native_rules_cc = repository_rule(implementation = _native_rules_cc_impl)

native_rules_java = repository_rule(implementation = _native_rules_java_impl)

def _bazel_major():
    """Major version of this Bazel; 0 where unknown (distribution builds report none)."""
    head = native.bazel_version.split(".")[0]
    return int(head) if head.isdigit() else 0

def muse_attn_workspace(native_rules = None):
    """Declares @xla_ffi and, under Bazel <= 4 (or an unversioned build such as Debian's), the
    offline @rules_cc / @rules_java stand-ins. native_rules: force them on (True) or off (False)."""
    if not native.existing_rule("xla_ffi"):
        xla_ffi_headers(name = "xla_ffi")
    if native_rules == None:
        native_rules = _bazel_major() <= 4
    if native_rules:
        if not native.existing_rule("rules_cc"):
            native_rules_cc(name = "rules_cc")
        if not native.existing_rule("rules_java"):
            native_rules_java(name = "rules_java")
