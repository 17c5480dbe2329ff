"""The table of `sf.sh train`: one row per case of tests/python/torch/train_worker.py (rank 0's
RESULT rows in the folder argv[1]): whether the compiled copy trained like eager (loss at every step,
every gradient of step 1), the errors, the forward/backward partitions, step times of eager,
symmflow and inductor, and each one's peak GPU memory."""
import json
import os
import sys

folder = sys.argv[1]
rows = [json.loads(line) for f in sorted(os.listdir(folder)) for line in open(os.path.join(folder, f))]
print(f"{'case':24} {'dtype':9} ok  loss_err  grad_err  fw/bw parts  eager ms  symmflow ms  "
      f"inductor ms  peak MB eager/symmflow/inductor")


def mb(b):
    return f"{b / 2**20:.1f}" if b else "-"


for r in rows:
    if r.get("rank") != 0:
        continue
    if "error" in r:
        print(f"{r['case']:24} {r['dtype']:9} ERROR {r['error'][-600:]}")
        continue
    print(f"{r['case']:24} {r['dtype']:9} {str(r['ok'])[0]}  {r['loss_err']:.2e}  {r['grad_err']:.2e}  "
          f"{r['forward']['partitions']}/{r['backward']['partitions']}  "
          f"{r['eager_step_s'] * 1e3:8.2f}  {r['symmflow_step_s'] * 1e3:11.2f}  "
          f"{r.get('inductor_step_s', 0) * 1e3:11.2f}  "
          f"{mb(r['eager_peak'])}/{mb(r['symmflow_peak'])}/{mb(r.get('inductor_peak'))}")
    if "grad_err_vs_f32" in r:
        print(f"    vs the f32 model: symmflow loss {r['loss_err_vs_f32']:.2e} grad "
              f"{r['grad_err_vs_f32']:.2e}; eager loss {r['eager_loss_err_vs_f32']:.2e} grad "
              f"{r['eager_grad_err_vs_f32']:.2e}")
