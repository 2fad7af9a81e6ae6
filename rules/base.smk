# The base model: built and pre-trained from scratch on the tiny config; a hub id on real configs.


rule base_model:
    input:
        corpus=data_file("pretrain"),
    output:
        directory(result("base")),
    log:
        log_file("base"),
    benchmark:
        benchmark_file("base")
    params:
        work=work_dir("base"),
        args=lambda wc: stage_args(config["base_model"]["build"]),
    threads: 2
    shell:
        "python -m stages.base_model --corpus {input.corpus} --output_dir {output} --work_dir {params.work}"
        " --seed {config[seed]} {params.args} > {log} 2>&1"
