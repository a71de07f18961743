import subprocess, sys, time, os
t=time.time()
B="/work/wt-kernels/target/release/bloatd"
out=sys.argv[sys.argv.index("--out")+1]
print(open('/proc/version').read())
def r(*c):
    t0=time.time()
    x=subprocess.run(c,capture_output=True,text=True); print(c, x.returncode, round(time.time()-t0,1), x.stdout[-3000:], x.stderr[-3000:], flush=True)
r("ls","/sys/kernel/btf/vmlinux")
r(B,"start","--no-cc")
r(B,"status","--json")
r(B,"stop")
r(B,"start")
r(B,"stop")
r(B,"start","--no-cc","--drwa=off","--policy","sport=5301,cc=reno")
r(B,"stop")
r("sh","-c","cat /run/bloatd/bloatd.log | tail -50")
print("took", time.time()-t)
