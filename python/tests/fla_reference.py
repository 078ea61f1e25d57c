"""FLA as a reference, without importing it: importing fla pulls in its Triton kernels and makes
transformers route its layers to them. Its files are found as an installed package or under
GDN_FLA_SITE (scripts/test-python.sh installs FLA there, beside the environment)."""

import ast
import importlib.util
import os
from pathlib import Path


def fla_file(*parts):
    """A file of FLA's package, from GDN_FLA_SITE or an installed fla; None when neither has it."""
    roots = [os.environ.get("GDN_FLA_SITE")]
    spec = importlib.util.find_spec("fla")
    if spec is not None and spec.submodule_search_locations:
        roots.append(str(Path(list(spec.submodule_search_locations)[0]).parent))
    for root in filter(None, roots):
        path = Path(root, "fla", *parts)
        if path.exists():
            return path
    return None


def naive():
    """FLA's naive reference module (fla/ops/gated_delta_rule/naive.py), loaded from its file, or None."""
    path = fla_file("ops", "gated_delta_rule", "naive.py")
    if path is None:
        return None
    module_spec = importlib.util.spec_from_file_location("fla_gated_delta_rule_naive", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def chunk_parameters():
    """FLA's ``chunk_gated_delta_rule`` parameters as written in its source, [(name, default source
    or None)], with ``**kwargs`` last as ("**kwargs", None); None when FLA is not found."""
    return parameters("chunk.py", "chunk_gated_delta_rule")


def fused_recurrent_parameters():
    """FLA's ``fused_recurrent_gated_delta_rule`` parameters, as ``chunk_parameters`` gives them."""
    return parameters("fused_recurrent.py", "fused_recurrent_gated_delta_rule")


def parameters(file_name, function_name):
    """The parameters of FLA's gated delta rule function ``function_name`` in ``file_name``."""
    path = fla_file("ops", "gated_delta_rule", file_name)
    if path is None:
        return None
    tree = ast.parse(path.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function_name)
    args = fn.args.args
    defaults = [None] * (len(args) - len(fn.args.defaults)) + [ast.unparse(d) for d in fn.args.defaults]
    params = [(a.arg, d) for a, d in zip(args, defaults)]
    if fn.args.kwarg is not None:
        params.append((f"**{fn.args.kwarg.arg}", None))
    return params
