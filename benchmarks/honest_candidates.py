"""The committed honest Triton candidate of each op, the one every benchmark script times."""

CANDIDATES = {
    "rmsnorm": "tasks/rmsnorm/candidates/triton_rmsnorm.py",
    "softmax": "tasks/softmax/candidates/triton_softmax.py",
    "rope": "tasks/rope/candidates/triton_rope.py",
    "mla_attention": "tasks/mla_attention/candidates/triton_mla.py",
    "mla_attention_paged": "tasks/mla_attention_paged/candidates/triton_mla_paged.py",
}
