# Data: the tiny config generates every data set locally from its seed.
from stages.data.schema import FILES as DATA_FILES


rule tiny_data:
    output:
        expand(data_file("{name}"), name=DATA_FILES),
        manifest=result("data", "manifest.json"),
    log:
        log_file("tiny_data"),
    benchmark:
        benchmark_file("tiny_data")
    params:
        out=result("data"),
        args=stage_args(config["data"]["tiny"]),
    shell:
        "python -m stages.data.tiny --output_dir {params.out} --seed {config[seed]} {params.args} > {log} 2>&1"
