"""ctg's PyTorch oracle: the same math, computed independently, compared.

How it works
------------
An *area* (ops, later layers, a tiny transformer, an optimizer) is two files:

  <area>_dump.cpp   builds ctg graphs, fills their leaves from a fixed seed, runs
                    ctg::value_and_grad steps (and ctg::forward steps) and writes a
                    tensor bundle (bundle.hpp / bundle.py) with, per case
                    "<case>.<dtype>": param/<leaf>, frozen/<leaf>, input/<leaf>,
                    loss, grad/<leaf>, value.  (oracle.hpp has the helpers; see
                    oracle::grad_case for the usual case.)
  check_<area>.py   one PyTorch formula per case, registered with @cases.formula,
                    then `sys.exit(oracle.main(cases))`.

For each case the driver here
  1. reads the leaves ctg used (params, frozen, inputs) and makes float64 torch
     tensors of exactly those values (params with requires_grad);
  2. calls the case's formula, which returns `out` (the case's output);
  3. forms the loss: sum(out * r) when the case has an input named "r" (the
     oracle::grad_case convention), otherwise `out` itself must be the scalar loss;
  4. differentiates the loss with torch.autograd (never by hand) and compares
     ctg's loss, every grad/<leaf> and, when dumped, value (against `out`) with the
     tolerance of the case's dtype tag (tolerances.py, the one place they live).
A case in the bundle with no formula, a formula never dumped, a param without a
gradient, a gradient of the wrong dtype or shape, or an all-zero reference
gradient (nothing checked) is an error too.

Adding an area
--------------
  tests/oracle/<area>_dump.cpp    int main(int argc, char** argv) {
                                    return oracle::run(argc, argv, [](oracle::dump& d) {
                                      using W = ctg::param<"w", ctg::f32, 4, 8>;
                                      oracle::grad_case(d, "thing.f32", f(W{}), ctg::wrt<W>);
                                    }); }
  tests/oracle/check_<area>.py    import oracle
                                  cases = oracle.Cases()
                                  @cases.formula("thing")
                                  def thing(t): return f_in_torch(t["w"])
                                  if __name__ == "__main__": sys.exit(oracle.main(cases))
  tests/oracle/CMakeLists.txt     ctg_oracle_area(<area>)   -> CTest test oracle.<area>

A case that is not "one step of a formula" (several steps, an optimizer) is a
`@cases.check(base)` instead: fn(chk, case, parts, tol) reads the case's records
itself and compares with chk.compare / chk.compare_allowed (see check_model.py).
An area whose rows are not the plain per-dtype ones names a family:
`@cases.formula(base, tolerances="layers.attention")` (tolerances.FAMILIES).

Running
-------
  ctest --test-dir build/oracle -R oracle -V
  /usr/bin/python3 tests/oracle/check_ops.py --dump build/.../oracle_ops_dump --bundle /tmp/ops.bundle
PyTorch is Debian's python3-torch, importable only by /usr/bin/python3. Without
torch (or numpy) a check prints why and exits 77, which CTest reports as skipped.
"""
import argparse
import os
import subprocess
import sys

SKIP = 77


def require_torch():
    """Import torch and numpy, or print why not and exit 77 (skipped)."""
    try:
        import numpy  # noqa: F401
        import torch
    except ImportError as e:
        print(f"oracle: skipped: {sys.executable} cannot import numpy/torch ({e}); "
              "install Debian's python3-torch and run the check with /usr/bin/python3")
        sys.exit(SKIP)
    torch.set_num_threads(1)
    return torch


class Cases:
    """The formulas of one area, by case base name (the part before '.<dtype>').

    formula(base, tolerances=None): the usual case (see the module docstring).
    check(base, tolerances=None):   a case whose records are not the usual
        param/input/loss/grad/value: fn(chk, case, parts, tol) compares them itself
        with chk.compare / chk.error (e.g. parameters after optimizer steps).
    `tolerances` names a family of rows in tolerances.py (tolerances.for_tag(tag,
    family)); None: the plain per-dtype rows.
    """

    def __init__(self):
        self.formulas = {}
        self.checks = {}
        self.families = {}

    def _register(self, table, base, tolerances):
        def register(fn):
            if base in self.formulas or base in self.checks:
                raise ValueError(f"two formulas for case '{base}'")
            table[base] = fn
            self.families[base] = tolerances
            return fn
        return register

    def formula(self, base, tolerances=None):
        return self._register(self.formulas, base, tolerances)

    def check(self, base, tolerances=None):
        return self._register(self.checks, base, tolerances)

    def __contains__(self, base):
        return base in self.formulas or base in self.checks


class Leaves(dict):
    """Leaf name -> float64 tensor; a missing name says which case and what exists."""

    def __init__(self, case, items):
        super().__init__(items)
        self.case = case

    def __missing__(self, key):
        raise KeyError(f"case {self.case} has no leaf '{key}' (it has: {', '.join(sorted(self))})")


def _group(tensors):
    """bundle dict -> {case: {kind_path: tensor}}, keeping file order."""
    cases = {}
    for name, t in tensors.items():
        case, sep, rest = name.partition("/")
        if not sep or not rest:
            raise ValueError(f"bundle tensor '{name}' is not '<case>/<what>'")
        cases.setdefault(case, {})[rest] = t
    return cases


class Checker:
    def __init__(self, torch, verbose=True):
        self.torch = torch
        self.verbose = verbose
        self.failures = 0
        self.checked = 0

    def error(self, case, msg):
        self.failures += 1
        print(f"FAIL {case}: {msg}")

    def compare(self, case, what, got, ref, tol, scale=None):
        """Elementwise |got-ref| <= tol.rtol*|ref| + tol.floor*scale; returns the worst err/allowed."""
        torch = self.torch
        ref = ref.detach().to(torch.float64)
        if scale is None:
            scale = ref.abs().max().item() if ref.numel() else 0.0
        allowed = tol.rtol * ref.abs() + tol.floor * scale
        return self.compare_allowed(case, what, got, ref, allowed,
                                    f"rtol {tol.rtol:.3g}, floor {tol.floor:.3g} x scale {scale:.4g}")

    def compare_allowed(self, case, what, got, ref, allowed, how=""):
        """Elementwise |got-ref| <= allowed (a tensor of ref's shape, or a number); returns the
        worst err/allowed. `how` says where `allowed` came from (printed on failure)."""
        torch = self.torch
        ref = ref.detach().to(torch.float64)
        got64 = got.to(torch.float64)
        if tuple(got64.shape) != tuple(ref.shape):
            self.error(case, f"{what}: shape {tuple(got64.shape)} from ctg, {tuple(ref.shape)} from torch")
            return float("inf")
        self.checked += 1
        allowed = torch.as_tensor(allowed, dtype=torch.float64).expand(ref.shape)
        err = (got64 - ref).abs()
        bad = ~(err <= allowed)  # also catches NaN
        # the worst element: err/allowed, with a non-finite value worst of all
        ratio = err / allowed.clamp_min(torch.finfo(torch.float64).tiny)
        ratio = torch.where(torch.isfinite(err), ratio, torch.full_like(ratio, float("inf")))
        flat = int(torch.argmax(ratio).item()) if ratio.numel() else 0
        idx = tuple(int(i) for i in _unravel(flat, tuple(ref.shape)))
        worst = ratio.reshape(-1)[flat].item() if ratio.numel() else 0.0
        if bool(bad.any()):
            g = got64.reshape(-1)[flat].item()
            r = ref.reshape(-1)[flat].item()
            self.error(case, f"{what}: {int(bad.sum())} of {ref.numel()} elements out of tolerance; "
                             f"worst at index {idx}: ctg {g!r}, torch {r!r}, |diff| {abs(g - r):.3e}, "
                             f"allowed {allowed.reshape(-1)[flat].item():.3e} ({how})")
        elif self.verbose:
            print(f"  ok   {case:<24} {what:<14} worst err/allowed {worst:6.3f} at {idx}")
        return worst

    def run_case(self, case, parts, formula, tol):
        torch = self.torch
        leaves, params = {}, {}
        for path, t in parts.items():
            kind, _, leaf = path.partition("/")
            if kind in ("param", "frozen", "input"):
                if leaf in leaves:
                    self.error(case, f"leaf '{leaf}' recorded twice")
                    return
                x = t.to(torch.float64)
                if kind == "param":
                    x.requires_grad_(True)
                    params[leaf] = (x, t.dtype)
                leaves[leaf] = x
            elif kind not in ("loss", "grad", "value"):
                self.error(case, f"unknown record '{path}'")
                return
        t = Leaves(case, leaves)
        out = formula(t)
        if not isinstance(out, torch.Tensor):
            self.error(case, f"the formula returned {type(out).__name__}, not a tensor")
            return
        out_ref = out.detach()
        if "value" in parts:
            self.compare(case, "value", parts["value"], out_ref, tol)
        if "loss" not in parts:
            if params or any(p.startswith("grad/") for p in parts):
                self.error(case, "has parameters or gradients but no loss")
            elif "value" not in parts:
                self.error(case, "has neither a loss nor a value: nothing to check")
            return
        if "r" in leaves:
            terms = out * leaves["r"]
            loss, loss_scale = terms.sum(), terms.detach().abs().sum().item()
        else:
            if out.dim() != 0:
                self.error(case, f"no input 'r' and the output has shape {tuple(out.shape)}: not a loss")
                return
            loss, loss_scale = out, out.detach().abs().item()
        self.compare(case, "loss", parts["loss"].reshape(()), loss.detach(), tol, scale=loss_scale)
        names = list(params)
        if not names:
            self.error(case, "has a loss but no parameters")
            return
        grads = torch.autograd.grad(loss, [params[n][0] for n in names], allow_unused=True)
        for n, g in zip(names, grads):
            what = f"grad/{n}"
            if what not in parts:
                self.error(case, f"param '{n}' has no recorded gradient")
                continue
            got = parts[what]
            if got.dtype != params[n][1]:
                self.error(case, f"{what}: dtype {got.dtype}, but the param is {params[n][1]}")
                continue
            if g is None or not bool((g != 0).any()):
                self.error(case, f"{what}: the torch gradient is zero everywhere: nothing is checked")
                continue
            self.compare(case, what, got, g, tol)
        for path in parts:
            if path.startswith("grad/") and path[5:] not in params:
                self.error(case, f"'{path}' recorded but '{path[5:]}' is not a recorded param")


def _unravel(flat, shape):
    idx = []
    for d in reversed(shape):
        idx.append(flat % d if d else 0)
        flat = flat // d if d else 0
    return list(reversed(idx))


def main(cases, argv=None):
    """Run the dump program, check every case against `cases`; returns the exit status."""
    parser = argparse.ArgumentParser(description="ctg oracle check")
    parser.add_argument("--dump", help="the area's dump program (runs it, writing --bundle)")
    parser.add_argument("--bundle", required=True, help="the bundle file (written by --dump, or read as is)")
    parser.add_argument("--only", default="", help="check only cases whose name contains this")
    parser.add_argument("-q", "--quiet", action="store_true", help="print failures and the summary only")
    args = parser.parse_args(argv)
    torch = require_torch()

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bundle
    import tolerances

    if args.dump:
        proc = subprocess.run([args.dump, args.bundle])
        if proc.returncode != 0:
            print(f"FAIL: {args.dump} exited with status {proc.returncode}")
            return 1
    by_case = _group(bundle.read(args.bundle))
    chk = Checker(torch, verbose=not args.quiet)
    seen = set()
    for case, parts in by_case.items():
        if args.only and args.only not in case:
            continue
        base, dot, tag = case.rpartition(".")
        if not dot or base not in cases:
            chk.error(case, f"no formula for case '{base or case}' in this check")
            continue
        try:
            tol = tolerances.for_tag(tag, cases.families[base])
        except KeyError as e:
            chk.error(case, str(e))
            continue
        seen.add(base)
        try:
            if base in cases.checks:
                cases.checks[base](chk, case, parts, tol)
            else:
                chk.run_case(case, parts, cases.formulas[base], tol)
        except Exception as e:  # a broken formula is a failure of this case, not of the run
            chk.error(case, f"{type(e).__name__}: {e}")
    if not args.only:
        for base in list(cases.formulas) + list(cases.checks):
            if base not in seen:
                chk.error(base, "has a formula but the dump program wrote no such case")
    n = len([c for c in by_case if not args.only or args.only in c])
    if chk.failures:
        print(f"oracle: {chk.failures} failure(s) in {n} cases ({chk.checked} tensors compared)")
        return 1
    if chk.checked == 0:
        print("oracle: nothing was compared")
        return 1
    print(f"oracle: {n} cases, {chk.checked} tensors within tolerance")
    return 0
