# Evaluation: k samples per prompt on every held-out set, for each model the config lists.


rule evaluate:
    input:
        unpack(eval_set_files),
        model=lambda wc: model_path(wc.stage),
    output:
        directory(eval_dir("{stage}")),
    log:
        log_file("eval_{stage}"),
    benchmark:
        benchmark_file("eval_{stage}")
    params:
        seed=config["seed"],
        template=lambda wc: evaluation_template(wc.stage),
        sets=eval_set_args,
        args=stage_args(config["evaluation"]["settings"]),
    threads: 1
    resources:
        **stage_resources("evaluate"),
    container:
        container_image("evaluate")
    shell:
        "python -m stages.evaluate --model_path {input.model} --template {params.template}"
        " --eval_sets {params.sets} --output_dir {output} --seed {params.seed} {params.args} > {log} 2>&1"
