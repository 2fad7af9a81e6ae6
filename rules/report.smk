# The report: the paper-style stage table over every evaluated model.


rule report:
    input:
        [eval_dir(stage) for stage in evaluated_models()],
    output:
        directory(result("report")),
    log:
        log_file("report"),
    benchmark:
        benchmark_file("report")
    params:
        stages=" ".join(evaluated_models()),
        eval_root=result("eval"),
    localrule: True
    shell:
        "python -m stages.report --eval_root {params.eval_root} --stages {params.stages}"
        " --output_dir {output} > {log} 2>&1"
