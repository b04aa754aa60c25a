"""NMS checks shared by suites/python/test_nms.py, the peer suite and scripts/peer_bench.py: the validity rules
of docs/ops/nms.md and the margin-clean test. Plain functions, importable without pytest's conftest."""
import torch


def check_validity(boxes, scores, keep, threshold, tol, idxs=None):
    """Raises AssertionError unless: indices distinct and in range; scores non-increasing along keep; no kept
    box overlaps an earlier kept box (same class) above threshold + tol; every suppressed box has a kept box
    of at least its score above threshold - tol."""
    from torchvision.ops import box_iou

    # On the boxes' device, in fp64: on CUDA the O(kept x suppressed) IoU work of a 100k-box case takes well
    # under a second (on the host it took 30 s).
    dev = boxes.device
    n = boxes.shape[0]
    keep = keep.to(dev)
    assert keep.unique().numel() == keep.numel(), "duplicate indices in keep"
    assert bool(((keep >= 0) & (keep < n)).all()), "keep index out of range"
    b, s = boxes.double(), scores.double().to(dev)
    ks = s[keep]
    assert bool((ks[:-1] >= ks[1:]).all()), "scores increase along keep"
    cls = None if idxs is None else idxs.to(dev)

    def iou(rows, cols):
        m = torch.nan_to_num(box_iou(b[rows], b[cols]), nan=0.0)
        if cls is not None:
            m = torch.where(cls[rows][:, None] == cls[cols][None, :], m, torch.zeros_like(m))
        return m

    for chunk in keep.split(4096):  # kept vs earlier kept, in row chunks
        m = iou(chunk, keep)
        pos = torch.arange(keep.numel(), device=dev)
        start = int((keep == chunk[0]).nonzero()[0])
        later = pos[None, :] > (start + torch.arange(chunk.numel(), device=dev))[:, None]
        assert not bool(((m > threshold + tol) & later).any()), "a kept box overlaps an earlier kept box"
    suppressed = torch.ones(n, dtype=torch.bool, device=dev)
    suppressed[keep] = False
    for chunk in suppressed.nonzero().flatten().split(4096):
        ok = (iou(keep, chunk) > threshold - tol) & (ks[:, None] >= s[chunk][None, :])
        assert bool(ok.any(0).all()), "a suppressed box has no suppressor"


def margin_clean(boxes, threshold, margin=1e-3, idxs=None, max_boxes=5000):
    """True when no same-class pair's IoU (fp64) lies within margin of the threshold: then every correct NMS
    returns the same keep list (given distinct scores). False without looking above max_boxes (O(n^2) work)."""
    from torchvision.ops import box_iou

    if boxes.shape[0] > max_boxes:
        return False
    b = boxes.double().cpu()
    for rows in torch.arange(b.shape[0]).split(2048):
        m = box_iou(b[rows], b)
        near = (m - threshold).abs() <= margin
        if idxs is not None:
            c = idxs.cpu()
            near &= c[rows][:, None] == c[None, :]
        if bool(near.any()):
            return False
    return True
