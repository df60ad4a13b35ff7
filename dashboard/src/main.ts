document.getElementById("main")!.textContent = "hello";
