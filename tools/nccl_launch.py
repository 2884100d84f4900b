# How tools/nccl_test.py and tools/ep_nccl_baseline.py start their ranks:
# NCCL's environment per net, torch.distributed's init, spawning, a free port.
import os


def net_env(net, plugin, socket_threads, socks, log_path):
    env = {
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "1",
        "NCCL_NVLS_ENABLE": "0",
        "NCCL_NET": net,
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": log_path,
    }
    if net == "P2P":  # NCCL's own GPU paths (NVLink): the loop's floor
        env.update({"NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0"})
        del env["NCCL_NET"]
    if net == "UCCL":
        env["NCCL_NET_PLUGIN"] = plugin
        env["NCCL_NET_PLUGIN_REF_COUNT"] = "1"
    if socket_threads:
        env["NCCL_SOCKET_NTHREADS"] = str(socket_threads)
        env["NCCL_NSOCKS_PERTHREAD"] = str(socks)
    return env


# Set (to "1") in the environment the ranks inherit by --share-gpu.
SHARE_GPU_ENV = "NCCL_TEST_SHARE_GPU"


def shared(share_gpu=None):
    """Whether every rank is on GPU 0: the argument, else the environment
    --share-gpu sets."""
    if share_gpu is None:
        return os.environ.get(SHARE_GPU_ENV) == "1"
    return share_gpu


def rank_gpu(rank, share_gpu=None):
    """Rank r's GPU: r, or 0 for every rank when the GPU is shared."""
    return 0 if shared(share_gpu) else rank


def init(rank, world, port, share_gpu=None):
    """torch.distributed over NCCL, rank r on GPU r. share_gpu (default:
    --share-gpu's environment): every rank on GPU 0, each with an
    NCCL_HOSTID of its own, so NCCL takes the ranks for hosts of their own
    (it refuses two ranks of one host on one GPU) and runs them over the
    network; run it under CUDA MPS."""
    import torch
    import torch.distributed as dist
    share_gpu = shared(share_gpu)
    gpu = rank_gpu(rank, share_gpu)
    if share_gpu:
        os.environ["NCCL_HOSTID"] = "uccl-rank-%d" % rank
    torch.cuda.set_device(gpu)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=world,
                            device_id=torch.device("cuda", gpu))
    return torch, dist


def spawn(fn, world, args, env):
    import torch.multiprocessing as mp
    # What torchrun sets: ranks on this host (the plugin sizes its engines
    # from it, else from the host's GPU count).
    env = dict(env, LOCAL_WORLD_SIZE=str(world))
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        mp.spawn(fn, args=(world,) + args, nprocs=world, join=True)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
