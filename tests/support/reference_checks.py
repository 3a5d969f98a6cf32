"""Comparison and reporting shared by the model-zoo reference scripts (tests/models/reference_*.py)."""


def compare(name, ours, theirs, rtol, failures, atol=0.0, unit=False):
    """Fails unless max |ours - theirs| <= rtol * max |ours| (at least 1 with unit) + atol;
    returns max |diff| / that scale."""
    if list(ours.shape) != list(theirs.shape):
        failures.append(f"{name}: shape {list(theirs.shape)}, expected {list(ours.shape)}")
        return float("inf")
    d = (ours.detach().double() - theirs.double()).abs().max().item()
    s = max(ours.detach().abs().max().item(), 1.0 if unit else 1e-12)
    if not d <= rtol * s + atol:
        failures.append(f"{name}: max |diff| {d:.3g}, max |reference| {s:.3g}, tolerance {rtol:g} relative")
    return d / s


def report(series, summary, failures):
    """Prints '<series> reference: <summary>' and one MISMATCH line per failure; the exit code."""
    print(f"{series} reference: " + summary)
    for f in failures:
        print("MISMATCH " + f)
    return 1 if failures else 0


def main(doc, self_test, check_case):
    """The command line of a reference script: CASE.safetensors or --self-test (exit 0/1, 2 on usage)."""
    import sys

    import torch

    if len(sys.argv) != 2:
        print(doc)
        sys.exit(2)
    torch.set_num_threads(1)
    sys.exit(self_test() if sys.argv[1] == "--self-test" else check_case(sys.argv[1]))
