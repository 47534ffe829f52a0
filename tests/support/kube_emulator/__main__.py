"""``python -m tests.support.kube_emulator``: run the emulator on its own (see the README's Kubernetes section)."""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from . import __doc__ as PACKAGE_DOC
from .store import KubeEmulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.kube_emulator", description=PACKAGE_DOC.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765, help="TCP port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for the emulator to this path")
    parser.add_argument("--context", default="kai-emulator", help="context name in the kubeconfig")
    parser.add_argument("--nodes", type=int, default=0, help="register this many GPU nodes (node-1 ... node-N)")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pod-gc-seconds", type=float, default=40.0, help="orphaned-pod GC delay (kube default 40)")
    parser.add_argument("--kubelet-start-seconds", type=float, default=1.0, help="delay before a bound pod runs")
    args = parser.parse_args(argv)
    if args.nodes < 0 or args.gpus_per_node < 0:
        parser.error("--nodes and --gpus-per-node must be >= 0")
    em = KubeEmulator(pod_gc_seconds=args.pod_gc_seconds, kubelet_start_seconds=args.kubelet_start_seconds)
    em.start(port=args.port)
    for i in range(1, args.nodes + 1):
        em.add_node(f"node-{i}", gpus=args.gpus_per_node)
    if args.kubeconfig:
        em.write_kubeconfig(args.kubeconfig, context=args.context)
    em.run_realtime()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"kube emulator listening on {em.url} ({args.nodes} nodes x {args.gpus_per_node} GPUs)"
          + (f"; kubeconfig {args.kubeconfig}" if args.kubeconfig else ""), flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        em.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
