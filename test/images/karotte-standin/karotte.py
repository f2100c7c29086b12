"""Stand-in karotte CLI: `karotte run --no-containerized --config FILE` and `karotte tasks list`."""

import json
import os
import sys
import time

TASKS = {
    # task id -> (instructions, the answer file, the expected answer)
    "count-lines": ("Count the lines of /etc/passwd into ~/answer.txt", "answer.txt", None),
    "say-hello": ("Write hello to ~/answer.txt", "answer.txt", "hello"),
}


def expected(task_id):
    if task_id == "count-lines":
        with open("/etc/passwd") as f:
            return str(sum(1 for _ in f))
    return TASKS[task_id][2]


def main(argv):
    if argv[:2] == ["tasks", "list"]:
        print("\n".join(sorted(TASKS)))
        return 0
    if not argv or argv[0] != "run" or "--no-containerized" not in argv or "--config" not in argv:
        print("usage: karotte run --no-containerized --config run_config.json", file=sys.stderr)
        return 2
    config = json.load(open(argv[argv.index("--config") + 1]))
    task = config["task_id"]
    if task not in TASKS:
        print(f"unknown task {task}", file=sys.stderr)
        return 2
    home = os.environ.get("HOME") or "/tmp"
    answer_path = os.path.join(home, TASKS[task][1])
    if config.get("model") == "oracle":
        with open(answer_path, "w") as f:
            f.write(expected(task) + "\n")
    try:
        got = open(answer_path).read().strip()
    except OSError:
        got = None
    score = 1.0 if got == expected(task) else 0.0
    out = os.path.join(os.getcwd(), "out")
    os.makedirs(out, exist_ok=True)
    transcript = {
        "run_id": config.get("run_id"),
        "task_id": task,
        "model": config.get("model"),
        "started_at": time.time(),
        "steps": [
            {"instructions": TASKS[task][0], "messages": [], "score": score, "metadata": {"answer": got}},
        ],
    }
    json.dump(transcript, open(os.path.join(out, "transcript.json"), "w"))
    print(f"task {task}: score {score}")
    return 0


sys.exit(main(sys.argv[1:]))
