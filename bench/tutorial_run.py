#!/usr/bin/env python3
"""The Python tutorial's whole 5-epoch job, timed on the same images as pets_train: the job
pets_train is compared with (the tutorial's code in ../shared/reference/ of the project's
documentation: timm's resnet50d with a frozen backbone, PIL decoding in a DataLoader of 4
workers, RandomResizedCrop / Resize to 224, Adam with OneCycle, mixed precision through
Accelerate, accuracy printed as `epoch N: XX.XX`).

Two deliberate differences, both the project's too: no pretrained weights are downloaded (the node
is offline; the speed does not depend on the weights), and the evaluation split is the held-out
20 % (the tutorial's `eval_split = random_perm[:cut]` evaluates on training images).

Without Accelerate the loop runs in plain PyTorch (autocast, and GradScaler for fp16), which is
what Accelerate does on one process; without timm the model is bench/python_step.py's. Writes a
JSON report: wall seconds from start to the last epoch's line (imports included), per epoch the
training and evaluation seconds and images/s.

For the paired comparison with pets_train (bench/paired_compare.sh): --store FILE takes the train
and evaluation images and the label ids from a pets_preprocess store, --initial FILE the whole
model (backbone and head) pets_train starts from (PETS_DUMP_STEPS's initial.safetensors), and the
report then carries each epoch's mean training loss over the images its steps trained, and each
step's over the images of all processes (step_losses). Several processes: under
`python3 -m torch.distributed.run --nproc_per_node N` (Accelerate on gloo).

usage: bench/tutorial_run.py --images DIR [--epochs 5] [--batch-size 64] [--workers 4]
       [--mixed-precision fp16|bf16|no] [--image-size 224] [--seed 42] [--report FILE]
       [--store FILE] [--initial FILE] [--max-lr 3e-2] [--threads N] [--dump-steps DIR:N]
       [--unfreeze none|layer4|layer3|layer2|layer1|all] [--backbone-lr-ratio 0.1]
       [--unfreeze-epoch 0]

--dump-steps DIR:N (with Accelerate, --mixed-precision no and --initial): every process writes its
first N training steps as pets_train's PETS_DUMP_STEPS does, for bench/step_compare.py.

--unfreeze STAGE trains the backbone from STAGE on as well, as pets_train's option of that name
does: layer3 trains layer3, layer4 and fc; all trains every parameter, the stem's too (BatchNorm
weights and biases of a trained stage included). The trained backbone parameters are a second
Adam group, first, whose OneCycle peak is --backbone-lr-ratio times --max-lr
(`OneCycleLR(max_lr=[ratio * max_lr, max_lr])`). With --unfreeze-epoch E they take no gradient
(requires_grad False) before epoch E: Adam gives them state at their first gradient, and their lr
follows the one schedule of the whole run. --unfreeze none (the default) is the tutorial's frozen
backbone: one Adam group over every parameter, as before.
"""
import time

START = time.perf_counter()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402

import PIL.Image  # noqa: E402
import torch  # noqa: E402
from torch.optim.lr_scheduler import OneCycleLR  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402
from torchvision.transforms import Compose, RandomResizedCrop, Resize, ToTensor  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


# --unfreeze's stages; the index is run.json's "unfrozen_stages" (pets_train's numbering).
UNFREEZE = ("none", "layer4", "layer3", "layer2", "layer1", "all")


def trained_backbone(named_parameters, stages):
    """The (name, parameter) pairs of the backbone that `stages` (an index into UNFREEZE) trains,
    in the model's order: the last `stages` residual stages, and at 5 (all) every parameter but
    fc's, the stem's conv1.* and bn1.* included."""
    layers = ("layer4", "layer3", "layer2", "layer1")[:stages]
    return [(n, p) for n, p in named_parameters
            if not n.startswith("fc.") and (stages >= len(UNFREEZE) - 1 or n.split(".")[0] in layers)]


def extract_label(fname):
    return re.search(r"^(.*)_\d+\.jpg$", os.path.basename(fname)).groups()[0]


class PetsDataset(Dataset):
    def __init__(self, file_names, image_transform, label_to_id):
        self.file_names, self.image_transform, self.label_to_id = file_names, image_transform, label_to_id

    def __len__(self):
        return len(self.file_names)

    def __getitem__(self, idx):
        fname = self.file_names[idx]
        image = self.image_transform(PIL.Image.open(fname).convert("RGB"))
        return {"image": image, "label": self.label_to_id[extract_label(fname)]}


class StepDump:
    """--dump-steps DIR:N: each process writes its first N training steps in PETS_DUMP_STEPS's
    format (include/pets/train/run/step_dump.hpp), so that bench/step_compare.py replays the
    tutorial loop's own inputs: its DataLoader's crops and order, and Accelerate's batches."""

    def __init__(self, spec, run, initial, rank):
        folder, _, steps = spec.rpartition(":")
        if not folder or not steps.isdigit():
            sys.exit("tutorial_run.py: --dump-steps must be DIR:N, got " + spec)
        self.folder, self.steps, self.rank = folder, int(steps), rank
        os.makedirs(folder, exist_ok=True)
        if rank == 0:
            import shutil

            with open(os.path.join(folder, "run.json"), "w") as f:
                json.dump(run, f, indent=1)
            shutil.copyfile(initial, os.path.join(folder, "initial.safetensors"))

    def wants(self, step):
        return step < self.steps

    def write(self, step, tensors):
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()},
                  os.path.join(self.folder, f"step-{step}-rank-{self.rank}.safetensors"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", required=True)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--mixed-precision", default="fp16", choices=["fp16", "bf16", "no"])
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--report", default="")
    p.add_argument("--store", default="")
    p.add_argument("--initial", default="")
    p.add_argument("--max-lr", type=float, default=3e-2)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--dump-steps", default="", metavar="DIR:N")
    p.add_argument("--unfreeze", default="none", choices=UNFREEZE)
    p.add_argument("--backbone-lr-ratio", type=float, default=0.1)
    p.add_argument("--unfreeze-epoch", type=int, default=0)
    a = p.parse_args()
    if not a.backbone_lr_ratio > 0:
        p.error(f"--backbone-lr-ratio must be > 0, got {a.backbone_lr_ratio:g}")
    if a.unfreeze_epoch < 0 or a.unfreeze_epoch >= a.epochs:
        p.error(f"--unfreeze-epoch must be in [0, --epochs), got {a.unfreeze_epoch} with {a.epochs} epochs")
    stages = UNFREEZE.index(a.unfreeze)
    if a.threads > 0:
        torch.set_num_threads(a.threads)

    fnames = sorted(os.path.join(a.images, f) for f in os.listdir(a.images) if f.endswith(".jpg"))
    if not fnames:
        p.error(a.images + ": no .jpg files")
    id_to_label = sorted(set(extract_label(f) for f in fnames))
    if a.store:
        import h5py

        with h5py.File(a.store, "r") as f:
            split_names = {g: [os.path.join(a.images, n.decode()) for n in f[g]["names"][()]]
                           for g in ("train", "eval")}
            id_to_label = [n.decode() if isinstance(n, bytes) else str(n) for n in f.attrs["label_names"]]
    label_to_id = {lbl: i for i, lbl in enumerate(id_to_label)}
    try:
        from accelerate import Accelerator
        from accelerate.utils import set_seed

        set_seed(a.seed)
        handlers = []
        if stages > 0 and a.unfreeze_epoch > 0:
            from accelerate.utils import DistributedDataParallelKwargs

            # Under DDP (several processes) the stages trained later must be registered when the
            # model is wrapped, and left out of the reduction (their gradients stay None) while
            # they take no gradient.
            handlers.append(DistributedDataParallelKwargs(find_unused_parameters=True))
        accelerator = Accelerator(mixed_precision=a.mixed_precision,
                                  cpu=not torch.cuda.is_available(), kwargs_handlers=handlers)
        device, runner = accelerator.device, "accelerate"
    except ImportError:
        accelerator, runner = None, "torch"
        torch.manual_seed(a.seed)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    if a.store:
        train_files, eval_files = split_names["train"], split_names["eval"]
    else:
        random_perm = torch.randperm(len(fnames)).tolist()  # the tutorial: numpy's permutation
        cut = int(0.8 * len(fnames))
        train_files = [fnames[i] for i in random_perm[:cut]]
        eval_files = [fnames[i] for i in random_perm[cut:]]
    size = (a.image_size, a.image_size)
    train_ds = PetsDataset(train_files, Compose([RandomResizedCrop(size, scale=(0.5, 1.0)), ToTensor()]),
                           label_to_id)
    eval_ds = PetsDataset(eval_files, Compose([Resize(size), ToTensor()]), label_to_id)
    # A generator of its own, seeded: when Accelerate shards a DataLoader whose sampler has none, it
    # gives it a new torch.Generator() (0.20.3; its default seed, not set_seed's), so that at several
    # processes the tutorial's order would be the same for every --seed.
    train_dl = DataLoader(train_ds, shuffle=True, batch_size=a.batch_size, num_workers=a.workers,
                          generator=torch.Generator().manual_seed(a.seed))
    eval_dl = DataLoader(eval_ds, shuffle=False, batch_size=a.batch_size * 2, num_workers=a.workers)

    try:
        from timm import create_model

        model, source = create_model("resnet50d", pretrained=False, num_classes=len(label_to_id)), "timm"
        if a.initial:
            from safetensors.torch import load_file

            model.load_state_dict(load_file(a.initial), strict=True)
    except ImportError:
        sys.path.insert(0, HERE)
        from python_step import ResNet50d

        model, source = ResNet50d(len(label_to_id)), "bench/python_step.py"
    for param in model.parameters():
        param.requires_grad = False
    for param in model.fc.parameters():
        param.requires_grad = True
    # The trained stages' parameters require a gradient while the model is wrapped (DDP registers
    # only those), and from epoch --unfreeze-epoch on (set at each epoch's start).
    backbone = [param for _, param in trained_backbone(model.named_parameters(), stages)]
    for param in backbone:
        param.requires_grad = True
    mean = torch.tensor([0.485, 0.456, 0.406])[None, :, None, None].to(device)
    std = torch.tensor([0.229, 0.224, 0.225])[None, :, None, None].to(device)
    if stages == 0:
        optimizer = torch.optim.Adam(params=model.parameters(), lr=a.max_lr / 25)
        max_lr = a.max_lr
    else:
        optimizer = torch.optim.Adam([{"params": backbone}, {"params": list(model.fc.parameters())}],
                                     lr=a.max_lr / 25)
        max_lr = [a.backbone_lr_ratio * a.max_lr, a.max_lr]
    lr_scheduler = OneCycleLR(optimizer=optimizer, max_lr=max_lr, epochs=a.epochs, steps_per_epoch=len(train_dl))
    if accelerator is not None:
        model, optimizer, train_dl, eval_dl, lr_scheduler = accelerator.prepare(
            model, optimizer, train_dl, eval_dl, lr_scheduler)
        autocast = contextlib.nullcontext()  # Accelerate wraps the forward in autocast itself
        scaler = None
    else:
        model = model.to(device)
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "no": torch.float32}[a.mixed_precision]
        autocast = torch.autocast(device.type, dtype=dtype, enabled=a.mixed_precision != "no")
        scaler = torch.amp.GradScaler(device.type, enabled=a.mixed_precision == "fp16")

    dump = None
    if a.dump_steps:
        if accelerator is None or a.mixed_precision != "no" or not a.initial:
            p.error("--dump-steps needs Accelerate, --mixed-precision no and --initial")
        run = {"ranks": accelerator.num_processes, "batch_size": a.batch_size, "epochs": a.epochs,
               "max_lr": a.max_lr, "seed": a.seed, "train_images": len(train_ds),
               "steps_per_epoch": len(train_dl), "image_size": a.image_size,
               "unfrozen_stages": stages, "backbone_lr_ratio": a.backbone_lr_ratio,
               "unfreeze_epoch": a.unfreeze_epoch}
        dump = StepDump(a.dump_steps, run, a.initial, accelerator.process_index)
        named_backbone = trained_backbone(accelerator.unwrap_model(model).named_parameters(), stages)
    step = 0
    epochs = []
    for epoch in range(a.epochs):
        t = time.perf_counter()
        for param in backbone:
            param.requires_grad = epoch >= a.unfreeze_epoch
        model.train()
        n_train = 0
        loss_sum = torch.zeros(2, dtype=torch.float64, device=device)  # [loss summed, images]
        step_sums = []  # per step: [loss summed, images] of this process
        for batch in train_dl:
            image, label = batch["image"].to(device), batch["label"].to(device)
            inputs = (image - mean) / std
            with autocast:
                outputs = model(inputs)
            loss = torch.nn.functional.cross_entropy(outputs.float(), label)
            step_lr = optimizer.param_groups[-1]["lr"]  # fc's group
            dumping = dump is not None and dump.wants(step)
            if dumping:
                fc = accelerator.unwrap_model(model).fc
                trained = [(n, q) for n, q in named_backbone if q.requires_grad]
                record = {"images": inputs, "labels": label,
                          "fc.weight.before": fc.weight.clone(), "fc.bias.before": fc.bias.clone(),
                          "lr": torch.tensor([step_lr], dtype=torch.float64),
                          "beta1": torch.tensor([optimizer.param_groups[-1]["betas"][0]], dtype=torch.float64)}
                if stages > 0:
                    record["lr_backbone"] = torch.tensor([optimizer.param_groups[0]["lr"]], dtype=torch.float64)
                record.update({n + ".before": q.clone() for n, q in trained})
                record.update({n: b.clone() for n, b in accelerator.unwrap_model(model).named_buffers()})
                total = accelerator.reduce(torch.tensor([loss.item() * label.shape[0], label.shape[0]],
                                                        dtype=torch.float64), reduction="sum")
                record["loss_sum"], record["images_total"] = total[:1], total[1:]
            if accelerator is not None:
                accelerator.backward(loss)
                if dumping:
                    record["fc.weight.grad"], record["fc.bias.grad"] = fc.weight.grad.clone(), fc.bias.grad.clone()
                    record.update({n + ".grad": q.grad.clone() for n, q in trained})
                optimizer.step()
                if dumping:
                    record["fc.weight.after"], record["fc.bias.after"] = fc.weight.clone(), fc.bias.clone()
                    record.update({n + ".after": q.clone() for n, q in trained})
                    dump.write(step, record)
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            step += 1
            lr_scheduler.step()
            optimizer.zero_grad()
            n_train += label.shape[0]
            step_sums.append([loss.item() * label.shape[0], label.shape[0]])
            loss_sum += torch.tensor(step_sums[-1], dtype=torch.float64, device=device)
        step_sums = torch.tensor(step_sums, dtype=torch.float64, device=device)
        if accelerator is not None:
            loss_sum = accelerator.reduce(loss_sum, reduction="sum")
            step_sums = accelerator.reduce(step_sums, reduction="sum")
        if device.type == "cuda":
            torch.cuda.synchronize()
        train_s = time.perf_counter() - t
        t = time.perf_counter()
        model.eval()
        accurate = num_elems = 0
        for batch in eval_dl:
            image, label = batch["image"].to(device), batch["label"].to(device)
            with torch.no_grad(), autocast:
                predictions = model((image - mean) / std).argmax(dim=-1)
            if accelerator is not None:  # without the last batch's padding, unlike the tutorial
                predictions, label = accelerator.gather_for_metrics((predictions, label))
            accurate_preds = predictions == label
            num_elems += accurate_preds.shape[0]
            accurate += int(accurate_preds.long().sum())
        eval_s = time.perf_counter() - t
        if accelerator is None or accelerator.is_main_process:
            print(f"epoch {epoch}: {100 * accurate / num_elems:.2f}", flush=True)
        epochs.append({"epoch": epoch, "train_seconds": train_s, "train_images_per_s": n_train / train_s,
                       "eval_seconds": eval_s, "eval_images_per_s": num_elems / eval_s,
                       "accuracy": accurate / num_elems,
                       "train_loss": loss_sum[0].item() / loss_sum[1].item(),
                       "step_losses": (step_sums[:, 0] / step_sums[:, 1]).tolist(), "lr": step_lr})
    report = {"runner": runner, "model": source, "torch": torch.__version__, "device": str(device),
              "images": len(fnames), "epochs": epochs, "batch_size": a.batch_size, "workers": a.workers,
              "mixed_precision": a.mixed_precision, "wall_seconds": time.perf_counter() - START}
    if a.report and (accelerator is None or accelerator.is_main_process):
        with open(a.report, "w") as f:
            json.dump(report, f, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "epochs"}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
