#!/usr/bin/env python3
"""Checks bench/strata_bench.py's components against the profile they came
from (for bench-strata-profile.test): every site, layer and kernel is
counted once, and each component's time is the sum of its kernels' times.

usage: check-bench-components.py STRATA.json
"""
import json
import math
import sys


def main():
    doc = json.load(open(sys.argv[1]))
    run = doc["runs"][0]
    comp = run["components"]
    calls = {}
    for k in run["profile"]["kernels"]:
        calls[k["label"]] = calls.get(k["label"], 0) + 1
    print(f"seed {doc['seed_tokens']} prefill {doc['prefill_tokens']}")

    def check(what, cond):
        print(f"{what}: {'ok' if cond else 'WRONG'}")

    check("sites = hc_up_mix calls", comp["hc_all_sites"]["count"] == calls["fused:hc_up_mix"])
    check("hc_site = hc_write_norm calls, hc_site_moe = hc_combine_write_norm calls",
          comp["hc_site"]["count"] == calls["fused:hc_write_norm"] == comp["hc_k1"]["count"]
          and comp["hc_site_moe"]["count"] == calls["fused:hc_combine_write_norm"])
    check("moe layers = moe_route calls",
          comp["moe_gemms"]["count"] == comp["moe_routed"]["count"] == calls["moe_route"])
    check("qsa layers = attention calls = qsa_select calls",
          comp["qsa_layer"]["count"] == calls["fused:slice+attention"] == calls["qsa_select"])
    check("delta layers = gated_delta_rule calls", comp["delta"]["count"] == calls["fused:slice+gated_delta_rule"])
    # Sums: K1 + K2 + K3 over the sites, the experts' four kernels per layer.
    fam = {f["label"]: f["ms"] for f in run["families"]}
    sites = comp["hc_all_sites"]
    k2k3 = fam["fused:hc_up_mix"] + fam.get("fused:hc_down_inject", 0) + fam.get("fused:hc_down", 0)
    ok = sites["total_ms"] > k2k3 and sites["total_ms"] < k2k3 + sum(fam.values())
    routed = comp["moe_routed"]["ms_mean"] * comp["moe_routed"]["count"]
    ok &= math.isclose(routed, fam["moe_route"] + fam["moe_sort"] + fam["moe_grouped_swiglu"]
                       + fam["moe_grouped_down"], rel_tol=1e-9)
    gemms = comp["moe_gemms"]["ms_mean"] * comp["moe_gemms"]["count"]
    ok &= math.isclose(gemms, fam["moe_grouped_swiglu"] + fam["moe_grouped_down"], rel_tol=1e-9)
    ok &= math.isclose(comp["delta"]["ms_mean"] * comp["delta"]["count"], fam["fused:slice+gated_delta_rule"],
                       rel_tol=1e-9)
    check("component sums = their kernels", ok)


if __name__ == "__main__":
    main()
