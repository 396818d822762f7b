"""What signed key bundles (VFedMH's ``authenticate_keys``) cost a run: key set-up and a whole run.

``python scripts/time_key_setup.py [RUNS [SETUPS]]`` takes the VFedMH run of the smoke profile
(MNIST, 256 training images, 1 epoch, 4 parties) and prints JSON with, for each setting (off,
on), medians (off and on alternate, so a load that drifts hits both):

- ``setup_ms``: one ``VFedMH.setup()`` of a fresh method on the run's parties, key generation
  to agreement (with signing: identity keys and the directory too, as in a fresh run), over
  SETUPS repeats (default 50);
- ``run_s``: the whole run through the split trainer (data loading excluded), over RUNS
  repeats (default 5);
- ``setup_bytes``: the setup phase's bytes in the ledger (deterministic).

It also checks that both settings give the same losses and accuracies. Run it on a quiet
machine: anything else running shifts both settings.
"""
import json
import statistics
import sys
import time

import torch

from vflkit.methods import get_method
from vflkit.studies import vfedmh as study
from vflkit.comm import Channel
from vflkit.training.split import build_parties, train


def main(runs: int = 5, setups: int = 50) -> dict:
    base = study.configs("smoke")["table2"]
    (config,) = [c for c in base if c.method == "vfedmh"]
    cfgs = {a: config.replace(options={**config.options, "authenticate_keys": a}) for a in (False, True)}
    setup_ms: dict[bool, list[float]] = {False: [], True: []}
    run_s: dict[bool, list[float]] = {False: [], True: []}
    results: dict[bool, dict] = {}
    parties, n_classes = build_parties(config, device=torch.device("cpu"), channel=Channel())
    for _ in range(setups):
        for authenticate in (False, True):
            method = get_method(config.method)(cfgs[authenticate], parties, num_classes=n_classes)
            t0 = time.perf_counter()
            method.setup()
            setup_ms[authenticate].append(1e3 * (time.perf_counter() - t0))
    for _ in range(runs):
        for authenticate in (False, True):
            results[authenticate] = train(cfgs[authenticate], device=torch.device("cpu"), progress=False)
            run_s[authenticate].append(results[authenticate]["wall_time_s"])
    strip = [[{k: v for k, v in row.items() if k != "elapsed_s"} for row in results[a]["history"]] for a in (False, True)]
    return {
        "config": config.key, "runs": runs, "setups": setups, "torch_threads": torch.get_num_threads(),
        "same_losses_and_accuracies": strip[0] == strip[1] and results[False]["final"] == results[True]["final"],
        **{("on" if a else "off"): {"setup_ms": statistics.median(setup_ms[a]), "run_s": statistics.median(run_s[a]),
                                    "setup_ms_quartiles": statistics.quantiles(setup_ms[a], n=4), "run_s_all": run_s[a],
                                    "setup_bytes": results[a]["comm"]["setup_total"]["bytes"]}
           for a in (False, True)},
    }


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:3])), indent=1))
