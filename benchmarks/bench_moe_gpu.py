"""The mixture of experts' dispatch on a CUDA GPU: what a CPU cannot check.

1. `shapesweep::grouped_mm` through `torch._grouped_mm` (bf16) against an fp32 per-expert
   reference, forward and both gradients, with an empty group;
2. no host sync in a MoE layer's forward and backward (`torch.cuda.set_sync_debug_mode`);
3. Inductor, fullgraph, static shapes, bf16 autocast, an idle expert: compiled == eager, for
   aligned widths (the grouped kernel) and odd ones (the per-expert loop);
4. eager vs compiled time of one MoE layer's forward + backward.

It imports the model code as `shapesweep export --format torch` writes it (`model.py`, torch
only), so it runs where shapesweep's dependencies are not installed:

    .venv/bin/python benchmarks/bench_moe_gpu.py --write-model DIR   # here: DIR/model.py
    python3 benchmarks/bench_moe_gpu.py --model-dir DIR               # on the GPU machine
"""

import argparse
import sys
import time
from pathlib import Path

import torch


def write_model(folder: Path) -> None:
    from shapesweep.trainers import torch_export

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(torch_export.source())


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def check(M) -> None:

    torch.manual_seed(0)
    dev = "cuda"
    print(torch.__version__, torch.cuda.get_device_name())

    # 1. the op: native kernel vs fp32 reference, an empty group, the transposed weight view
    E, T, K, N = 4, 1000, 256, 512
    x = torch.randn(T, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
    W = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16, requires_grad=True)  # [E, out, in]
    ends = torch.tensor([300, 300, 700, 1000], device=dev, dtype=torch.int32)
    w = W.transpose(-2, -1)
    print("kernel serves fwd", M._grouped_kernel_serves(x, w), "wgrad",
          M._grouped_kernel_serves(x.t(), torch.empty(T, N, device=dev, dtype=torch.bfloat16)))
    y = M.grouped_mm(x, w, ends)
    dy = torch.randn_like(y)
    y.backward(dy)
    xf, Wf = x.detach().float().requires_grad_(), W.detach().float().requires_grad_()
    bounds = [(0, 300), (300, 300), (300, 700), (700, 1000)]
    ref = torch.cat([xf[s:e] @ Wf[g].t() for g, (s, e) in enumerate(bounds)])
    ref.backward(dy.float())
    print("fwd rel", rel(y, ref), "dx rel", rel(x.grad, xf.grad), "dW rel", rel(W.grad, Wf.grad),
          "empty-group dW max", W.grad[1].abs().max().item())

    # 2. no host sync in an aligned MoEFFN's forward + backward (eager, bf16 autocast)
    moe = M.MoEFFN(256, 512, 256, 8, 2, "swiglu", bias=False).to(dev)
    h = torch.randn(8, 512, 256, device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        moe(h).float().sum().backward()  # warm
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            moe(h).float().sum().backward()
        print("no host sync: OK")
    except RuntimeError as e:
        print("host sync:", str(e)[:200])
    torch.cuda.set_sync_debug_mode(0)

    # 3. compiled (Inductor, fullgraph, static) == eager, an idle expert, aligned and odd widths
    for width, d_h in ((256, 512), (72, 36)):
        torch.manual_seed(1)
        moe = M.MoEFFN(width, d_h, width, 4, 1, "swiglu", bias=True).to(dev)
        h = torch.randn(4, 256, width, device=dev)
        h[..., 0] = 5.0
        with torch.no_grad():
            moe.router.weight[3] = 0.0
            moe.router.weight[3, 0] = -10.0  # expert 3 gets no token
        out = {}
        for name, fn in (("eager", moe), ("compiled", torch.compile(moe, fullgraph=True, dynamic=False))):
            moe.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                o = fn(h)
            o.float().square().mean().backward()
            out[name] = (o.detach().float(), [p.grad.clone() for p in moe.parameters()], moe.load.tolist())
        g = max(rel(a, b) for a, b in zip(out["compiled"][1], out["eager"][1], strict=True) if b.norm() > 0)
        print(f"width {width} d_h {d_h}: load {out['compiled'][2]}, out rel {rel(out['compiled'][0], out['eager'][0]):.2e}, grad rel max {g:.2e}")

    # 4. time: eager vs compiled MoEFFN fwd+bwd, bf16, 8 experts top-2, 16k tokens x 1024
    moe = M.MoEFFN(1024, 1024, 1024, 8, 2, "swiglu", bias=False).to(dev)
    h = torch.randn(8, 2048, 1024, device=dev)
    for name, fn in (("eager", moe), ("compiled", torch.compile(moe, fullgraph=True, dynamic=False))):
        for i in range(13):
            if i == 3:
                torch.cuda.synchronize()
                t = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                fn(h).float().sum().backward()
        torch.cuda.synchronize()
        print(f"{name}: {(time.perf_counter() - t) / 10 * 1e3:.2f} ms per fwd+bwd (16,384 tokens, d 1024, d_h 1024, 8 experts top-2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-model", type=Path, help="write DIR/model.py and stop")
    parser.add_argument("--model-dir", type=Path, help="the folder holding model.py")
    args = parser.parse_args()
    if args.write_model:
        write_model(args.write_model)
        return
    sys.path.insert(0, str(args.model_dir))
    import model

    check(model)


if __name__ == "__main__":
    main()
